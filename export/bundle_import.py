"""Bundle -> checkpoint: rebuild a trainable PyTorch checkpoint from a bundle's ONNX graphs.

A bundle is what ships; training runs are not committed. This recovers the weights so a shipped
model can be fine-tuned or benchmarked against other engines on exactly the weights users get.
An int8 bundle gives its dequantized weights, (q - zero_point) * scale: the int8 model's own
weights in fp32, not the original fp32 ones.

Where the exporter kept a parameter's name (biases, norms, embeddings) it is copied by name. A
Linear weight is exported as an anonymous, transposed MatMul initializer; it is found by walking
up from the Add node that reads the Linear's bias, which keeps its name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from models.checkpoint import Checkpoint
from models.config import RunConfig, model_config_from_dict
from models.registry import build_model
from service.engine.bundle import load_bundle
from service.engine.tokenizer import Tokenizer

PREFIX = "model."  # the graph wrappers hold the model as `self.model`
FUSED = ("q_proj", "k_proj", "v_proj")  # in the order step_graph fuses them
MAX_HOPS = 6  # Add <- Mul <- Mul <- Cast <- MatMulInteger <- weight, with slack


class BundleImportError(ValueError):
    """The bundle's graphs do not hold every parameter of the model its manifest describes."""


class GraphWeights:
    """A graph's initializers (int8 ones dequantized), and the Linear weights found from their biases."""

    def __init__(self, path: Path) -> None:
        model = onnx.load(str(path))
        self.inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.producer = {out: node for node in model.graph.node for out in node.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)

    def tensor(self, name: str) -> np.ndarray | None:
        """A float initializer by name, dequantizing an int8 one."""
        node = self.producer.get(name)
        if node is not None and node.op_type == "Identity":  # the exporter dedups equal initializers
            return self.tensor(node.input[0])
        if name in self.inits:
            return self.inits[name].astype(np.float32)
        if name + "_quantized" in self.inits:
            q = self.inits[name + "_quantized"].astype(np.float32)
            zero_point = self.inits[name + "_zero_point"].astype(np.float32)
            return np.asarray((q - zero_point) * self.inits[name + "_scale"], dtype=np.float32)
        return None

    def _upstream(self, name: str) -> Iterator[str]:
        frontier, seen = [name], {name}
        for _ in range(MAX_HOPS):
            nxt = []
            for value in frontier:
                node = self.producer.get(value)
                for inp in node.input if node is not None else []:
                    if inp not in seen:
                        seen.add(inp)
                        nxt.append(inp)
                        yield inp
            frontier = nxt

    def linear_weight(self, bias_name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """The (out, in) weight of the Linear whose bias initializer is `bias_name`."""
        for add in self.readers.get(bias_name, []):
            if add.op_type != "Add":
                continue
            other = next(i for i in add.input if i != bias_name)
            for name in self._upstream(other):
                base = name.removesuffix("_quantized")
                array = self.tensor(base)
                if array is not None and array.ndim == 2 and array.T.shape == shape:
                    return array.T
        return None


def import_bundle(bundle_dir: Path, run_config: RunConfig) -> Checkpoint:
    """The bundle's model as a checkpoint; `run_config` supplies [data]/[train], the manifest [model]."""
    bundle = load_bundle(bundle_dir)  # checksums verified: never train on a corrupted graph
    manifest = bundle.manifest
    if manifest.tokenizers.kind != "sentencepiece":
        # a converted checkpoint: fine-tune it with transformers, from the checkpoint it came from
        raise BundleImportError(f"{bundle_dir}: a converted ({manifest.provenance.origin}) bundle cannot be imported")
    if manifest.architecture.family != "transformer":
        # ONNX GRU ops fuse and reorder the gate weights; undoing that is not written yet.
        raise BundleImportError(f"{bundle_dir}: importing is supported for transformer bundles only")
    model_config = model_config_from_dict(dict(manifest.architecture.config))
    model = build_model(model_config)
    graphs = [GraphWeights(bundle.file(g.file)) for g in (manifest.graphs.encoder, manifest.graphs.decoder)]
    state = model.state_dict()
    missing = []
    for key, param in state.items():
        array = _find(graphs, key, tuple(param.shape))
        if array is None:
            missing.append(key)
        else:
            state[key] = torch.from_numpy(np.ascontiguousarray(array)).reshape(param.shape)
    if getattr(model_config, "tie_output", False):
        missing = [k for k in missing if k != "output.weight"]
        state["output.weight"] = state["tgt_embed.weight"]
    if missing:
        raise BundleImportError(f"{bundle_dir}: no weights found in the graphs for {', '.join(missing)}")
    model.load_state_dict(state)
    model.eval()
    config = RunConfig(model=model_config, data=run_config.data, train=run_config.train)
    return Checkpoint(
        config=config,
        model=model,
        src_tokenizer=Tokenizer(bundle.file(manifest.tokenizers.source).read_bytes()),
        tgt_tokenizer=Tokenizer(bundle.file(manifest.tokenizers.target).read_bytes()),
        progress={"imported_from": str(bundle_dir), "quantization": manifest.quantization.mode},
    )


def _find(graphs: list[GraphWeights], key: str, shape: tuple[int, ...]) -> np.ndarray | None:
    for graph in graphs:
        array = graph.tensor(PREFIX + key)
        if array is not None and array.shape == shape:
            return array
        array = _written(graph, key)
        if array is not None and array.shape == shape:
            return array
    if key.endswith(".weight") and len(shape) == 2:
        for graph in graphs:
            array = graph.linear_weight(PREFIX + key.removesuffix(".weight") + ".bias", shape)
            if array is not None:
                return array
    return None


def _written(graph: GraphWeights, key: str) -> np.ndarray | None:
    """A parameter as export/step_graph.py stores it: a Linear's weight transposed (`.weight_t`), and
    the self-attention's q, k and v projections fused along the output axis (`qkv_proj`)."""
    module, _, kind = key.rpartition(".")
    suffix = "weight_t" if kind == "weight" else kind
    array = graph.tensor(f"{PREFIX}{module}.{suffix}")
    attention, _, projection = module.rpartition(".")
    if array is None and projection in FUSED:
        fused = graph.tensor(f"{PREFIX}{attention}.qkv_proj.{suffix}")  # (H, 3H) or (3H,)
        if fused is not None:
            array = np.split(fused, 3, axis=-1)[FUSED.index(projection)]
    return None if array is None else (array.T if kind == "weight" else array)
