"""The Transformer's decoder step, written directly as an ONNX graph (issue 17).

The traced step graph (torch.onnx.export of `Transformer.decode_step_at`) had 469 nodes fp32, most
of them shape arithmetic around each head split. Here a step is one token per row, so every
activation is 2-D (B, H) and every head split is a Reshape by a constant: 164 nodes (int8: 716 ->
420 with the per-row quantization ops). That bought 1.10x at batch 1 and nothing at 32
(docs/benchmarks.md): onnxruntime's dispatch was not the cost. What did pay is the KV cache: the
step reads the cache and returns only its own keys and values, (B, N, D) a layer, which the
runtime writes in place (manifest `StateSpec.write = "slot"`), where the traced step copied every
layer's whole cache each step to write one slot. The step's own slot is attended to apart from
the cache and summed last, so results match PyTorch's to rounding (~5e-6 in log-probs), not bit
for bit. The self-attention's Q, K and V projections are one MatMul unless kept apart.

Initializers keep the model's parameter names, so `import-bundle` can read them back: a Linear's
weight is stored as its transpose, named `<linear>.weight_t` (in, out), the fused projection as
`<attention>.qkv_proj.weight_t` (H, 3H) and `.bias` (3H,).

Legend: B rows, H d_model, N heads, D head dim, P cache slots, S source length, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import torch
import torch.nn.functional as F
from onnx import NodeProto, TensorProto, helper, numpy_helper
from torch import nn

from export.graph_io import FamilyIO
from models.transformer import DecoderLayer, MultiHeadAttention, Transformer
from service.engine.manifest import POSITIONS

PREFIX = "model."  # as the traced graphs name parameters (their wrappers hold the model as `model`)
ACTIVATION_OPS = {F.relu: "Relu", F.gelu: "Gelu"}  # swish has no op of its own: x * sigmoid(x)


class _Builder:
    """Nodes and initializers of one graph, with unique names for intermediate tensors."""

    def __init__(self) -> None:
        self.nodes: list[NodeProto] = []
        self.inits: dict[str, onnx.TensorProto] = {}

    def const(self, name: str, value: npt.NDArray[np.generic]) -> str:
        if name not in self.inits:
            self.inits[name] = numpy_helper.from_array(np.ascontiguousarray(value), name)
        return name

    def param(self, name: str, tensor: torch.Tensor, transpose: bool = False) -> str:
        value = tensor.detach().float().cpu().numpy()
        return self.const(PREFIX + name, value.T if transpose else value)

    def op(self, op_type: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, **attrs))
        return output

    def linear(self, x: str, module: nn.Linear, name: str, out: str) -> str:
        """x (B, in) @ W^T + b -> (B, out)."""
        y = self.op("MatMul", [x, self.param(f"{name}.weight_t", module.weight, transpose=True)], f"{out}/matmul")
        if module.bias is None:
            return y
        return self.op("Add", [y, self.param(f"{name}.bias", module.bias)], out)

    def layer_norm(self, x: str, module: nn.Module, name: str) -> str:
        assert isinstance(module, nn.LayerNorm)
        scale, bias = self.param(f"{name}.weight", module.weight), self.param(f"{name}.bias", module.bias)
        return self.op("LayerNormalization", [x, scale, bias], f"/{name}/out", axis=-1, epsilon=module.eps)


GRAPH_NAME = "decoder_step"  # how a written decoder is told from a traced one (export/regraph.py)


def decoder_step_graph(model: Transformer, io: FamilyIO, opset: int, fuse_qkv: bool = True) -> onnx.ModelProto:
    """The decoder declared by `io` (a fixed-width cache, rows at their own positions), as ONNX.
    `fuse_qkv=False` keeps q, k and v apart, so an int8 bundle re-graphed keeps its int8 values
    (fused, the three share one quantization scale)."""
    cfg = model.config
    H, N = cfg.d_model, cfg.heads
    D = H // N
    b = _Builder()
    b.const("/shape/step", np.array([-1, N, D], np.int64))  # (B, N, 1, D) -> (B, N, D)
    b.const("/zero_f", np.array(0.0, np.float32))
    b.const("/axes/-1", np.array([-1], np.int64))
    b.const("/shape/heads", np.array([-1, N, 1, D], np.int64))  # (B, H) -> (B, N, 1, D)
    b.const("/shape/rows", np.array([-1, H], np.int64))  # (B, N, 1, D) -> (B, H)
    b.const("/shape/per_layer", np.array([0, 1, N, -1], np.int64))  # (B, N, 1, X) -> (B, 1, N, X)
    b.const("/scale", np.array(math.sqrt(D), np.float32))
    b.const("/-inf", np.array(-np.inf, np.float32))

    x = _embed(b, model)  # (B, H)
    masks = _cache_masks(b)
    cross_blocked = b.op("Unsqueeze", ["src_pad_mask", b.const("/axes/1,2", np.array([1, 2], np.int64))],
                         "/cross_blocked")  # fmt: skip  # (B, 1, 1, S)
    cross_weights, self_weights = [], []
    for i, layer in enumerate(model.decoder_layers):
        assert isinstance(layer, DecoderLayer)
        x, s_w, c_w = _decoder_layer(b, layer, i, x, masks, cross_blocked, fuse_qkv)
        self_weights.append(s_w)
        cross_weights.append(c_w)
    if isinstance(model.decoder_norm, nn.LayerNorm):
        x = b.layer_norm(x, model.decoder_norm, "decoder_norm")
    logits = b.linear(x, model.output, "output", "/logits")  # (B, V)
    b.op("LogSoftmax", [logits], "log_probs", axis=-1)
    b.op("Concat", cross_weights, "cross_attention", axis=1)  # (B, L, N, S)
    b.op("Concat", self_weights, "self_attention", axis=1)  # (B, L, N, P)
    b.op("Add", [POSITIONS, b.const("/one", np.array(1, np.int64))], f"next_{POSITIONS}")

    graph = helper.make_graph(
        b.nodes,
        GRAPH_NAME,
        [_value_info(t.name, t.dtype, t.shape) for t in io.decoder.inputs],
        [_value_info(t.name, t.dtype, t.shape) for t in io.decoder.outputs],
        list(b.inits.values()),
    )
    opsets = [helper.make_opsetid("", opset)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="attention-mt")
    # the IR version the opset needs, as the traced graphs have, not the newest this onnx writes:
    # an older onnxruntime (the container's pin, a user's) refuses IR versions it does not know
    proto.ir_version = helper.find_min_ir_version_for(opsets)
    return proto


def _embed(b: _Builder, model: Transformer) -> str:
    """Token embedding (scaled) plus the row's position: (B, H). The positions table is a Constant
    node, not an initializer, so int8 export leaves it in fp32 as the traced graph did."""
    table = b.op("Gather", [b.param("tgt_embed.weight", model.tgt_embed.weight), "prev_tokens"], "/embed/tokens")
    if model.scale != 1.0:
        table = b.op("Mul", [table, b.const("/embed/scale", np.array(model.scale, np.float32))], "/embed/scaled")
    positions = model.positions.detach().float().numpy()  # (max_positions, H)
    b.nodes.append(helper.make_node("Constant", [], ["/positions/table"],
                                    value=numpy_helper.from_array(positions, "/positions/table")))  # fmt: skip
    pos = b.op("Gather", ["/positions/table", POSITIONS], "/embed/positions")  # (B, H)
    return b.op("Add", [table, pos], "/embed/out")


def _cache_masks(b: _Builder) -> tuple[str, str, str]:
    """For the self-attention over the cache (B, 1, 1, P) each: slots a row may not read yet, its own
    slot (this step's, computed apart), and the same as 0/1 floats."""
    shape = b.op("Shape", ["past_key.0"], "/cache/shape", start=2, end=3)  # [P]
    slots_count = b.op("Squeeze", [shape], "/cache/P")
    zero, one = b.const("/zero", np.array(0, np.int64)), b.const("/one", np.array(1, np.int64))
    slots = b.op("Range", [zero, slots_count, one], "/cache/slots")  # (P,)
    column = b.op("Unsqueeze", [POSITIONS, b.const("/axes/1", np.array([1], np.int64))], "/cache/positions")  # (B, 1)
    axes = b.const("/axes/1,2", np.array([1, 2], np.int64))
    later = b.op("Unsqueeze", [b.op("Greater", [slots, column], "/cache/later"), axes], "/cache/blocked")
    own = b.op("Unsqueeze", [b.op("Equal", [slots, column], "/cache/here"), axes], "/cache/own")
    return later, own, b.op("Cast", [own], "/cache/own_float", to=TensorProto.FLOAT)


def _decoder_layer(
    b: _Builder,
    layer: DecoderLayer,
    i: int,
    x: str,
    masks: tuple[str, str, str],
    cross_blocked: str,
    fuse_qkv: bool,
) -> tuple[str, str, str]:
    """One layer on x (B, H); x after it, and its self (B, 1, N, P) and cross (B, 1, N, S) weights."""
    p = f"decoder_layers.{i}"
    h = b.layer_norm(x, layer.norm1, f"{p}.norm1") if layer.pre else x
    q, k, v = _qkv(b, layer.self_attn, f"{p}.self_attn", h, fuse_qkv)  # (B, N, 1, D) each
    for kv, value in (("key", k), ("value", v)):  # the runtime writes them into its cache, in place
        b.op("Reshape", [value, "/shape/step"], f"step_{kv}.{i}")  # (B, N, D)
    out, self_weights = _self_attend(b, layer.self_attn, f"{p}.self_attn", i, q, k, v, masks)
    x = _residual(b, layer, layer.norm1, f"{p}.norm1", x, out)
    h = b.layer_norm(x, layer.norm2, f"{p}.norm2") if layer.pre else x
    q = b.op("Reshape", [b.linear(h, layer.cross_attn.q_proj, f"{p}.cross_attn.q_proj", f"/{p}/cross/q"),
                         "/shape/heads"], f"/{p}/cross/q_heads")  # fmt: skip
    out, cross_weights = _cross_attend(
        b, layer.cross_attn, f"{p}.cross_attn", q, f"cross_key.{i}", f"cross_value.{i}", cross_blocked
    )
    x = _residual(b, layer, layer.norm2, f"{p}.norm2", x, out)
    h = b.layer_norm(x, layer.norm3, f"{p}.norm3") if layer.pre else x
    x = _residual(b, layer, layer.norm3, f"{p}.norm3", x, _feed_forward(b, layer, f"{p}.ff", h))
    return x, self_weights, cross_weights


def _qkv(b: _Builder, attn: MultiHeadAttention, name: str, h: str, fuse: bool) -> tuple[str, str, str]:
    """h (B, H) -> q, k, v (B, N, 1, D): one MatMul for the three projections, or three."""
    if not fuse:
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        parts = [
            b.linear(h, m, f"{name}.{part}_proj", f"/{name}/{part}") for m, part in zip(projections, "qkv", strict=True)
        ]
    else:
        weight = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])  # (3H, H)
        bias = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])  # (3H,)
        fused = b.op("MatMul", [h, b.param(f"{name}.qkv_proj.weight_t", weight, transpose=True)], f"/{name}/qkv/mm")
        fused = b.op("Add", [fused, b.param(f"{name}.qkv_proj.bias", bias)], f"/{name}/qkv")  # (B, 3H)
        parts = [f"/{name}/{part}" for part in "qkv"]
        b.nodes.append(helper.make_node("Split", [fused], parts, name=f"/{name}/split", axis=1, num_outputs=3))
    q, k, v = (b.op("Reshape", [part, "/shape/heads"], f"{part}/heads") for part in parts)
    return q, k, v


def _cross_attend(
    b: _Builder, attn: MultiHeadAttention, name: str, q: str, k: str, v: str, blocked: str
) -> tuple[str, str]:
    """softmax(q k^T / sqrt(D), masked) v over the source, projected: (B, H), and the weights (B, 1, N, S)."""
    p = f"/{name}"
    k_t = b.op("Transpose", [k], f"{p}/k_t", perm=[0, 1, 3, 2])  # (B, N, D, S): fused into the MatMul
    weights = _softmax(b, p, b.op("MatMul", [q, k_t], f"{p}/qk"), blocked)  # (B, N, 1, S)
    return _project(b, attn, name, _mixed(b, f"{p}/mixed", weights, v), weights)


def _self_attend(
    b: _Builder, attn: MultiHeadAttention, name: str, i: int, q: str, k: str, v: str, masks: tuple[str, str, str]
) -> tuple[str, str]:
    """Attention over the cache (slots before the row's position) and this step's own k and v, which
    the cache does not hold yet: the graph reads the cache and never copies it. The own slot's
    score takes the slot's place before the softmax; its weight times v is added after the sum
    over the others (whose weight there is 0). (B, H), and the weights (B, 1, N, P)."""
    p, (later, own, own_float) = f"/{name}", masks
    past_t = b.op("Transpose", [f"past_key.{i}"], f"{p}/past_t", perm=[0, 1, 3, 2])  # (B, N, D, P)
    past_scores = b.op("MatMul", [q, past_t], f"{p}/past_qk")  # (B, N, 1, P)
    own_t = b.op("Transpose", [k], f"{p}/own_t", perm=[0, 1, 3, 2])  # (B, N, D, 1)
    own_score = b.op("MatMul", [q, own_t], f"{p}/own_qk")  # (B, N, 1, 1)
    weights = _softmax(b, p, b.op("Where", [own, own_score, past_scores], f"{p}/qk"), later)  # (B, N, 1, P)
    own_weight = b.op("ReduceSum", [b.op("Mul", [weights, own_float], f"{p}/own_only"), "/axes/-1"],
                      f"{p}/own_weight", keepdims=1)  # fmt: skip  # (B, N, 1, 1): one term, exact
    past_weights = b.op("Where", [own, "/zero_f", weights], f"{p}/past_weights")
    mixed = _mixed(b, f"{p}/past_mixed", past_weights, f"past_value.{i}")
    mixed = b.op("Add", [mixed, b.op("Mul", [own_weight, v], f"{p}/own_mixed")], f"{p}/mixed")  # (B, N, 1, D)
    return _project(b, attn, name, mixed, weights)


def _softmax(b: _Builder, p: str, qk: str, blocked: str) -> str:
    """Attention weights from raw scores (B, N, 1, X): scaled as PyTorch does, blocked slots -inf."""
    scores = b.op("Div", [qk, "/scale"], f"{p}/scores")
    return b.op("Softmax", [b.op("Where", [blocked, "/-inf", scores], f"{p}/masked")], f"{p}/weights", axis=-1)


def _mixed(b: _Builder, out: str, weights: str, values: str) -> str:
    """weights (B, N, 1, X) @ values (B, N, X, D): onnxruntime's one-row kernel, exact across batches
    because the service makes every width X a multiple of 8 (export/invariant_quant.py)."""
    return b.op("MatMul", [weights, values], out)


def _project(b: _Builder, attn: MultiHeadAttention, name: str, mixed: str, weights: str) -> tuple[str, str]:
    """Heads (B, N, 1, D) concatenated and projected: (B, H); the weights as (B, 1, N, X) for the outputs."""
    rows = b.op("Reshape", [mixed, "/shape/rows"], f"/{name}/concat_heads")  # (B, H)
    out = b.linear(rows, attn.out_proj, f"{name}.out_proj", f"/{name}/out")
    return out, b.op("Reshape", [weights, "/shape/per_layer"], f"/{name}/weights_by_layer")


def _residual(b: _Builder, layer: DecoderLayer, norm: nn.Module, name: str, x: str, out: str) -> str:
    y = b.op("Add", [x, out], f"/{name}/residual")
    return y if layer.pre else b.layer_norm(y, norm, name)


def _feed_forward(b: _Builder, layer: DecoderLayer, name: str, h: str) -> str:
    up = b.linear(h, layer.ff.up, f"{name}.up", f"/{name}/up")  # (B, F)
    activation = ACTIVATION_OPS.get(layer.ff.activation)
    if activation is not None:
        hidden = b.op(activation, [up], f"/{name}/act")
    else:  # swish: x * sigmoid(x)
        hidden = b.op("Mul", [up, b.op("Sigmoid", [up], f"/{name}/sigmoid")], f"/{name}/act")
    return b.linear(hidden, layer.ff.down, f"{name}.down", f"/{name}/down")


def _value_info(name: str, dtype: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    types = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}
    return helper.make_tensor_value_info(name, types[dtype], shape)
