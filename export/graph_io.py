"""The graph inputs and outputs of each family, declared once as data.

This table drives `torch.onnx.export` (names and dynamic axes), goes into the manifest, and is
checked against the onnxruntime sessions when the service loads a bundle.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.config import ModelConfig, RNNConfig, TransformerConfig
from service.engine.manifest import CACHE_AXIS, POSITIONS, GraphSpec, StateSpec, TensorSpec


@dataclass(frozen=True)
class FamilyIO:
    encoder: GraphSpec
    decoder: GraphSpec
    state: list[StateSpec]
    statics: list[str]  # encoder outputs fed to every decoder step, in decoder-input order


def t(name: str, dtype: str, *shape: int | str) -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=list(shape))  # type: ignore[arg-type]


SOURCE = [t("src_ids", "int64", "batch", "src_len"), t("src_pad_mask", "bool", "batch", "src_len")]


def _rnn(cfg: RNNConfig) -> FamilyIO:
    M, D = 2 * cfg.enc_hidden, cfg.dec_hidden
    A = {"general": D, "additive": cfg.attn_dim}.get(cfg.attention, M)
    statics = [t("memory", "float32", "batch", "src_len", M), t("keys", "float32", "batch", "src_len", A)]
    encoder = GraphSpec(file="encoder.onnx", inputs=SOURCE, outputs=[*statics, t("init_hidden", "float32", "batch", D)])
    decoder = GraphSpec(
        file="decoder.onnx",
        inputs=[t("prev_tokens", "int64", "batch"), SOURCE[1], *statics, t("hidden", "float32", "batch", D)],
        outputs=[
            t("log_probs", "float32", "batch", cfg.tgt_vocab),
            t("cross_attention", "float32", "batch", 1, 1, "src_len"),
            t("hidden_out", "float32", "batch", D),
        ],
    )
    state = [StateSpec(input="hidden", output="hidden_out", batch_axis=0, init="encoder:init_hidden")]
    return FamilyIO(encoder, decoder, state, [s.name for s in statics])


def _transformer(cfg: TransformerConfig) -> FamilyIO:
    L, N, D = cfg.dec_layers, cfg.heads, cfg.d_model // cfg.heads
    statics = [t(f"cross_{kv}.{i}", "float32", "batch", N, "src_len", D) for i in range(L) for kv in ("key", "value")]
    # A KV cache of fixed width per step: each row writes at its own position (models/transformer.py
    # decode_step_at), so sentences can join a batch mid-decode; the service widens it as rows grow.
    kvs = [(kv, i) for i in range(L) for kv in ("key", "value")]
    past = [t(f"past_{kv}.{i}", "float32", "batch", N, CACHE_AXIS, D) for kv, i in kvs]
    # only this step's keys and values: the runtime writes them into the cache at each row's position
    present = [t(f"step_{kv}.{i}", "float32", "batch", N, D) for kv, i in kvs]
    positions, next_positions = t(POSITIONS, "int64", "batch"), t(f"next_{POSITIONS}", "int64", "batch")
    encoder = GraphSpec(
        file="encoder.onnx",
        inputs=SOURCE,
        outputs=[*statics, t("encoder_self_attention", "float32", "batch", cfg.enc_layers, N, "src_len", "src_len")],
    )
    decoder = GraphSpec(
        file="decoder.onnx",
        inputs=[t("prev_tokens", "int64", "batch"), SOURCE[1], *statics, positions, *past],
        outputs=[
            t("log_probs", "float32", "batch", cfg.tgt_vocab),
            t("cross_attention", "float32", "batch", L, N, "src_len"),
            t("self_attention", "float32", "batch", L, N, CACHE_AXIS),
            next_positions,
            *present,
        ],
    )
    state = [StateSpec(input=POSITIONS, output=next_positions.name, batch_axis=0, init="empty")]
    state += [
        StateSpec(input=p.name, output=q.name, batch_axis=0, init="empty", write="slot")
        for p, q in zip(past, present, strict=True)
    ]
    return FamilyIO(encoder, decoder, state, [s.name for s in statics])


def family_io(cfg: ModelConfig) -> FamilyIO:
    if isinstance(cfg, RNNConfig):
        return _rnn(cfg)
    return _transformer(cfg)


def dynamic_axes(spec: GraphSpec) -> dict[str, dict[int, str]]:
    """torch.onnx.export's dynamic_axes from the symbolic dims of a graph's declaration."""
    tensors = [*spec.inputs, *spec.outputs]
    return {x.name: {i: d for i, d in enumerate(x.shape) if isinstance(d, str)} for x in tensors}
