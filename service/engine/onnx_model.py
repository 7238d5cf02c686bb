"""A bundle's two ONNX graphs behind the search's step protocol, on onnxruntime.

Sessions are created once. State layouts come from the manifest: which decoder inputs are per-
source constants (taken from the encoder by name), which are state carried step to step, how
each state tensor starts, and which axis is its batch. Nothing here knows the model family.

Legend: B batch, S source length, N rows being decoded, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from service.engine.bundle import Bundle, BundleInvalid, graph_io_problems
from service.engine.manifest import StateSpec, TensorSpec
from service.engine.search import FloatArray, IntArray, suppress

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


@dataclass(frozen=True)
class SessionConfig:
    """onnxruntime options; the service fills these from its settings."""

    provider: str = "cpu"  # cpu | cuda
    intra_op_threads: int = 0  # 0: onnxruntime's default (one per core)
    inter_op_threads: int = 0
    enable_mem_arena: bool = True
    enable_mem_pattern: bool = True


@dataclass
class OnnxState:
    src_pad_mask: npt.NDArray[np.bool_]  # (N, S)
    statics: dict[str, npt.NDArray[Any]]  # encoder outputs the decoder reads every step, (N, ...)
    state: dict[str, npt.NDArray[Any]]  # decoder state inputs, batch on their spec's axis
    extras: dict[str, npt.NDArray[Any]] = field(default_factory=dict)  # other encoder outputs
    origin: IntArray | None = None  # (N,) the encoded sentence of each row; None: row i is sentence i


def make_session(path: str, config: SessionConfig) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = config.intra_op_threads
    options.inter_op_num_threads = config.inter_op_threads
    options.enable_cpu_mem_arena = config.enable_mem_arena
    options.enable_mem_pattern = config.enable_mem_pattern
    providers = [PROVIDERS[config.provider]]
    if config.provider == "cuda":
        providers.append(PROVIDERS["cpu"])  # for the few ops CUDA lacks; startup checks the main one
    return ort.InferenceSession(path, sess_options=options, providers=providers)


def _load_session(bundle: Bundle, file: str, config: SessionConfig) -> ort.InferenceSession:
    try:
        return make_session(str(bundle.file(file)), config)
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BundleInvalid(bundle.path, [f"{file}: onnxruntime cannot load it ({reason})"]) from exc


def _empty(spec: TensorSpec, batch: int) -> npt.NDArray[Any]:
    shape = [batch if d == "batch" else (d if isinstance(d, int) else 0) for d in spec.shape]
    return np.zeros(shape, dtype=spec.dtype)


class OnnxSeq2Seq:
    """encode() once per batch, then step()/reorder() as the search asks."""

    def __init__(self, bundle: Bundle, config: SessionConfig | None = None) -> None:
        config = config or SessionConfig()
        graphs = bundle.manifest.graphs
        self.bundle = bundle
        self.encoder = _load_session(bundle, graphs.encoder.file, config)
        self.decoder = _load_session(bundle, graphs.decoder.file, config)
        problems = graph_io_problems(graphs.encoder, self.encoder.get_inputs(), self.encoder.get_outputs())
        problems += graph_io_problems(graphs.decoder, self.decoder.get_inputs(), self.decoder.get_outputs())
        if problems:
            raise BundleInvalid(bundle.path, problems)
        self.state_specs: list[StateSpec] = bundle.manifest.state
        state_inputs = {s.input for s in self.state_specs}
        self.static_names = [
            t.name for t in graphs.decoder.inputs if t.name not in state_inputs | {"prev_tokens", "src_pad_mask"}
        ]
        self.output_names = [t.name for t in graphs.decoder.outputs]
        special, search = bundle.manifest.special_ids, bundle.manifest.search
        suppressed = (special.pad, special.bos) if search.suppressed_ids is None else search.suppressed_ids
        self.suppressed, self.renormalize = tuple(dict.fromkeys(suppressed)), search.renormalize

    def encode(self, src_ids: IntArray, src_pad_mask: npt.NDArray[np.bool_]) -> OnnxState:
        """Run the encoder on (B, S) ids and mask; returns the state before the first step."""
        names = [t.name for t in self.bundle.manifest.graphs.encoder.outputs]
        values = self.encoder.run(names, {"src_ids": src_ids, "src_pad_mask": src_pad_mask})
        outputs = dict(zip(names, values, strict=True))
        state = {}
        for spec in self.state_specs:
            if spec.init == "empty":
                state[spec.input] = _empty(self.bundle.manifest.graphs.decoder.input(spec.input), len(src_ids))
            else:
                state[spec.input] = outputs[spec.init.removeprefix("encoder:")]
        statics = {name: outputs[name] for name in self.static_names}
        extras = {k: v for k, v in outputs.items() if k not in statics}
        return OnnxState(src_pad_mask, statics, state, extras)

    def run_step(self, tokens: IntArray, state: OnnxState) -> tuple[dict[str, npt.NDArray[Any]], OnnxState]:
        """One decoder step; every output by name, and the state for the next step."""
        feeds = {"prev_tokens": tokens, "src_pad_mask": state.src_pad_mask, **state.statics, **state.state}
        outputs = dict(zip(self.output_names, self.decoder.run(self.output_names, feeds), strict=True))
        new_state = {spec.input: outputs[spec.output] for spec in self.state_specs}
        return outputs, OnnxState(state.src_pad_mask, state.statics, new_state, state.extras, state.origin)

    def step(self, tokens: IntArray, state: OnnxState) -> tuple[FloatArray, FloatArray, OnnxState]:
        outputs, new_state = self.run_step(tokens, state)
        log_probs = suppress(outputs["log_probs"], self.suppressed, self.renormalize)
        return log_probs, outputs["cross_attention"], new_state

    def reorder(self, state: OnnxState, rows: IntArray) -> OnnxState:
        """Select state rows. The per-source tensors (cross-attention keys and values, the mask) follow
        only the sentence of each row: a beam reshuffle within sentences leaves them as they are,
        which saves copying them every beam step."""
        origin = np.arange(len(state.src_pad_mask)) if state.origin is None else state.origin
        new_origin = origin[rows]
        same_sources = len(new_origin) == len(origin) and bool(np.array_equal(new_origin, origin))
        return OnnxState(
            src_pad_mask=state.src_pad_mask if same_sources else state.src_pad_mask[rows],
            statics=state.statics if same_sources else {k: v[rows] for k, v in state.statics.items()},
            state={s.input: np.take(state.state[s.input], rows, axis=s.batch_axis) for s in self.state_specs},
            extras=state.extras,
            origin=new_origin,
        )
