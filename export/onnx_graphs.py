"""The two ONNX graphs of a model: `encoder` and a one-step `decoder`.

Thin wrappers give each graph flat positional tensors in the order the I/O table declares,
then torch's exporter writes them with that table's names and dynamic axes, and onnx.checker
checks them. The exported graphs compute once per source what does not change per step (the
RNN's attention keys U h_j, the Transformer's per-layer cross-attention K/V).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch
from torch import Tensor, nn

from export.graph_io import FamilyIO, dynamic_axes
from export.invariant_quant import PADDED_AXES, make_padding_invariant
from export.step_graph import decoder_step_graph
from models.registry import Seq2Seq
from models.transformer import Transformer
from service.engine.manifest import POSITIONS, GraphSpec

OPSET = 20
SAMPLE_BATCH, SAMPLE_SRC_LEN, SAMPLE_PAST_LEN = 2, 5, 3  # sizes > 1, so no axis is specialised


class EncoderGraph(nn.Module):
    def __init__(self, model: Seq2Seq, io: FamilyIO) -> None:
        super().__init__()
        self.model: Seq2Seq = model
        self.io = io

    def forward(self, src_ids: Tensor, src_pad_mask: Tensor) -> tuple[Tensor, ...]:
        model = self.model
        if isinstance(model, Transformer):
            enc = model.encode(src_ids, src_pad_mask, need_weights=True)  # introspection reads it
        else:
            enc = model.encode(src_ids, src_pad_mask)
        outputs = dict(enc.statics)
        for spec in self.io.state:
            if spec.init.startswith("encoder:"):
                outputs[spec.init.removeprefix("encoder:")] = enc.state[spec.input]
        if enc.self_attention is not None:
            outputs["encoder_self_attention"] = enc.self_attention
        return tuple(outputs[t.name] for t in self.io.encoder.outputs)


class DecoderGraph(nn.Module):
    def __init__(self, model: Seq2Seq, io: FamilyIO) -> None:
        super().__init__()
        self.model, self.io = model, io
        self.state_inputs = [s.input for s in io.state]

    def forward(self, prev_tokens: Tensor, src_pad_mask: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
        n_static = len(self.io.statics)
        statics = dict(zip(self.io.statics, tensors[:n_static], strict=True))
        state = dict(zip(self.state_inputs, tensors[n_static:], strict=True))
        outputs: dict[str, Tensor] = {}
        if POSITIONS in state:  # rows at their own positions in a fixed-width cache
            assert isinstance(self.model, Transformer)
            positions = state.pop(POSITIONS)
            out = self.model.decode_step_at(prev_tokens, positions, statics, src_pad_mask, state)
            rows = torch.arange(len(positions))
            for spec in self.io.state:  # the graph returns only the step's entry of an in-place cache
                if spec.write == "slot":
                    out.state[spec.input] = out.state[spec.input][rows, :, positions]  # (B, N, D)
            out.state[POSITIONS] = positions + 1
        else:
            out = self.model.decode_step(prev_tokens, statics, src_pad_mask, state)
        outputs.update(log_probs=out.log_probs, cross_attention=out.cross_attention)
        if out.self_attention is not None:
            outputs["self_attention"] = out.self_attention
        for spec in self.io.state:
            outputs[spec.output] = out.state[spec.input]
        return tuple(outputs[t.name] for t in self.io.decoder.outputs)


def initial_state(model: Seq2Seq, io: FamilyIO, ids: Tensor, mask: Tensor, slots: int) -> list[Tensor]:
    """The decoder state before the first step, in the I/O table's order: a fixed-width cache has
    `slots` empty slots and every row at position 0 (the service widens it as it goes instead)."""
    initial = model.encode(ids, mask).state
    if POSITIONS not in {s.input for s in io.state}:
        return [initial[s.input] for s in io.state]
    state = {POSITIONS: torch.zeros(len(ids), dtype=torch.long)}
    for name, empty in initial.items():  # (B, N, 0, D)
        state[name] = empty.new_zeros(*empty.shape[:2], slots, *empty.shape[3:])
    return [state[s.input] for s in io.state]


def sample_inputs(model: Seq2Seq, io: FamilyIO) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Example inputs for tracing: a padded batch and a decoder state with some past."""
    vocab = model.config.src_vocab
    src_ids = torch.randint(4, vocab, (SAMPLE_BATCH, SAMPLE_SRC_LEN))
    src_pad_mask = torch.zeros(SAMPLE_BATCH, SAMPLE_SRC_LEN, dtype=torch.bool)
    src_pad_mask[1, -2:] = True
    src_ids = src_ids.masked_fill(src_pad_mask, 0)
    with torch.no_grad():
        enc_out = dict(
            zip((t.name for t in io.encoder.outputs), EncoderGraph(model, io)(src_ids, src_pad_mask), strict=True)
        )
    statics = [enc_out[name] for name in io.statics]
    state = []
    for spec in io.state:
        decl = io.decoder.input(spec.input)
        if spec.input == POSITIONS:  # rows at different positions, inside the cache
            state.append(torch.arange(SAMPLE_BATCH) % SAMPLE_PAST_LEN)
            continue
        shape = [SAMPLE_BATCH if d == "batch" else SAMPLE_PAST_LEN if isinstance(d, str) else d for d in decl.shape]
        state.append(torch.randn(*shape) * 0.1)
    prev_tokens = torch.randint(4, model.config.tgt_vocab, (SAMPLE_BATCH,))
    return (src_ids, src_pad_mask), (prev_tokens, src_pad_mask, *statics, *state)


def export_graphs(
    model: Seq2Seq, io: FamilyIO, out_dir: Path, opset: int = OPSET, fuse_qkv: bool = True
) -> dict[str, Path]:
    """Write encoder.onnx and decoder.onnx into out_dir and check them; returns their paths.
    A Transformer's decoder step is written op by op (export/step_graph.py), the rest traced."""
    model.eval()
    encoder_args, decoder_args = sample_inputs(model, io)
    paths = {}
    for graph, module, args in (
        (io.encoder, EncoderGraph(model, io).eval(), encoder_args),
        (io.decoder, DecoderGraph(model, io).eval(), decoder_args),
    ):
        path = out_dir / graph.file
        if graph is io.decoder and isinstance(model, Transformer) and POSITIONS in {s.input for s in io.state}:
            with torch.no_grad():  # written op by op: a third of the traced graph's nodes
                onnx.save(decoder_step_graph(model, io, opset, fuse_qkv), str(path))
            _finish(path, graph)
            paths[graph.file] = path
            continue
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
            torch.onnx.export(
                module,
                args,
                str(path),
                input_names=[t.name for t in graph.inputs],
                output_names=[t.name for t in graph.outputs],
                dynamic_axes=dynamic_axes(graph),
                opset_version=opset,
                dynamo=False,
            )
        model.eval()  # the exporter restores the wrapper's mode onto the model afterwards; keep it in eval
        _finish(path, graph)
        paths[graph.file] = path
    return paths


def _finish(path: Path, spec: GraphSpec) -> None:
    """Declared shapes stamped, sums over padding made to add in order, the graph checked."""
    exported = onnx.load(str(path))
    stamp_declared_shapes(exported, spec)
    # sums over the padded source, and over the cache's unwritten slots, add in order: batch-invariant
    for axis in PADDED_AXES:
        make_padding_invariant(exported, axis)
    onnx.save(exported, str(path))
    onnx.checker.check_model(str(path), full_check=True)


def stamp_declared_shapes(model: onnx.ModelProto, spec: GraphSpec) -> None:
    """Write the declared dims onto the graph's inputs and outputs.

    The tracer loses some static sizes (a masked_fill leaves `memory`'s feature size symbolic);
    the declaration is the truth, and the service checks sessions against it."""
    declared = {t.name: t.shape for t in [*spec.inputs, *spec.outputs]}
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims, declared[value.name], strict=True):
            if isinstance(size, int):
                dim.Clear()
                dim.dim_value = size
            else:
                dim.Clear()
                dim.dim_param = size
