"""The seven-bit per-row form (export/invariant_quant.py) in fewer passes, bit for bit the same.

`per_row` spells each row's quantization as onnxruntime's elementwise operators, and at a batch of
rows those passes over the activation cost as much as the int8 GEMM they feed (a profile of the
en-zh decoder step at 32 rows: Div, Round, Add and Cast about a fifth of the step). Two fused
operators compute the same values:

- q = Cast(Add(Round(Div(x, s)), 64)) becomes `QuantizeLinear`. QuantizeLinear divides by the
  scale, rounds half to even and adds the zero point, as Div, Round and Add do; its saturation to
  0..255 never binds (q stays under 128).
- y = Mul(Cast(MatMulInteger(q, w)), out_scale) becomes `DequantizeLinear` of the int32 product:
  the same float of each int32 times the same scale.

Both take one scale a row only as a 1-D scale along an axis, so an activation x of (N, K) (every
one in a decoder step) keeps its row ranges 1-D (ReduceMax without keepdims) and gets one pass over
x to quantize and one over each product to rescale, where there were four and two. An activation of
higher rank (the encoder's (B, S, K)) keeps Div(x, s) and its rescales, and QuantizeLinear(·, 1, zp)
does the rounding, shift and cast in one pass.

The names of q and y stay, so `find_quantized_matmuls` and `import-bundle` read either spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper

from export.invariant_quant import (
    ROW_QUANT,
    Graph,
    batch_invariant,
    copy_model,
    inferred_shapes,
    prune,
    replace_nodes,
)

LEAN = f"{ROW_QUANT}/lean"  # prefix of the constants this pass adds


@dataclass(frozen=True)
class RowChain:
    """One activation's row quantization as per_row writes it, and the rescales of its products."""

    reduce: NodeProto  # ReduceMax(|x|) (..., 1)
    x_div: NodeProto  # Div(x, scale)
    dropped: tuple[NodeProto, ...]  # Round, [Add 64], Cast: what QuantizeLinear does
    zero_point: str
    rescales: tuple[tuple[NodeProto, NodeProto], ...]  # (Cast, Mul(out_scale)) after each MatMulInteger

    @property
    def q(self) -> str:
        return str(self.dropped[-1].output[0])


def lean_row_quant(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every row-quantize chain and its rescales fused (a no-op on a graph
    without them)."""
    model = copy_model(model)
    graph, shapes = model.graph, inferred_shapes(model)
    g = Graph(graph)
    g.add_constant(f"{LEAN}/one", np.array(1.0, np.float32))
    placed: dict[str, list[NodeProto]] = {}  # new nodes, where the node of this first output was
    dropped: set[str] = set()
    for node in list(graph.node):
        chain = _row_chain(node, g)
        if chain is None:
            continue
        if len(shapes.get(chain.x_div.input[0], [])) == 2 and _rows_only(chain, g):
            _fuse_rows(chain, placed, dropped)
        else:
            _fuse_rounding(chain, placed, dropped)
    nodes: list[NodeProto] = []
    for node in graph.node:
        if node.output[0] not in dropped:
            nodes += placed.get(node.output[0], [node])
    replace_nodes(graph, nodes)
    prune(graph)
    return model


def spelled_long(model: onnx.ModelProto) -> bool:
    """Whether `model` has a row-quantize chain that `lean_row_quant` would fuse."""
    return any(n.op_type == "Round" and n.output[0].endswith(f"{ROW_QUANT}/rounded") for n in model.graph.node)


def invariant_int8_file(src: Path, dst: Path) -> None:
    """A quantized graph in the form exports ship: batch-invariant, seven-bit rows, lean."""
    onnx.save(lean_row_quant(batch_invariant(onnx.load(str(src)))), str(dst))


def _row_chain(cast: NodeProto, g: Graph) -> RowChain | None:
    """The chain ending in `cast`, when it is a uint8 Cast <- [Add 64] <- Round <- Div(x, s) <-
    ... ReduceMax, each step read once."""
    if cast.op_type != "Cast" or helper.get_node_attr_value(cast, "to") != TensorProto.UINT8:
        return None
    dropped, node = [cast], g.producer.get(cast.input[0])
    zero_point = f"{ROW_QUANT}/u8_0"
    if node is not None and node.op_type == "Add" and node.input[1] == f"{ROW_QUANT}/64":
        dropped.append(node)
        zero_point, node = f"{ROW_QUANT}/u8_64", g.producer.get(node.input[0])
    if node is None or node.op_type != "Round":
        return None
    dropped.append(node)
    x_div = g.producer.get(node.input[0])
    if x_div is None or x_div.op_type != "Div" or any(len(g.consumers.get(n.output[0], [])) != 1 for n in dropped[1:]):
        return None
    scale_div = g.producer.get(x_div.input[1])  # Div(range, levels), range = Max(ReduceMax, tiny)
    range_max = g.producer.get(scale_div.input[0]) if scale_div is not None and scale_div.op_type == "Div" else None
    reduce = g.producer.get(range_max.input[0]) if range_max is not None and range_max.op_type == "Max" else None
    if reduce is None or reduce.op_type != "ReduceMax":
        return None
    rescales = []
    for user in g.consumers.get(cast.output[0], []):
        casts = g.consumers.get(user.output[0], []) if user.op_type == "MatMulInteger" else []
        muls = g.consumers.get(casts[0].output[0], []) if len(casts) == 1 and casts[0].op_type == "Cast" else []
        if len(muls) == 1 and muls[0].op_type == "Mul":
            rescales.append((casts[0], muls[0]))
    return RowChain(reduce, x_div, tuple(reversed(dropped)), zero_point, tuple(rescales))


def _rows_only(chain: RowChain, g: Graph) -> bool:
    """Whether the row ranges feed nothing but this chain's scale (read only by Div(x, s)) and its
    products' rescales (each read only by its Mul), and q nothing but those products: then all of
    them can be 1-D."""
    maxes = g.consumers.get(chain.reduce.output[0], [])
    if len(maxes) != 1:
        return False
    readers = g.consumers.get(maxes[0].output[0], [])
    muls = {mul.output[0] for _, mul in chain.rescales}

    def feeds(node: NodeProto) -> list[str]:
        return [u.output[0] for u in g.consumers.get(node.output[0], [])]

    scales = [r for r in readers if r.output[0] == chain.x_div.input[1] and feeds(r) == [chain.x_div.output[0]]]
    rescales = [r for r in readers if len(feeds(r)) == 1 and feeds(r)[0] in muls]
    products = len(g.consumers.get(chain.q, []))
    return len(scales) == 1 and len(readers) == 1 + len(rescales) and len(rescales) == len(muls) == products


def _fuse_rounding(chain: RowChain, placed: dict[str, list[NodeProto]], dropped: set[str]) -> None:
    """Div(x, s) stays; its rounding, shift and cast become one QuantizeLinear(·, 1, zero point)."""
    quantize = [chain.x_div.output[0], f"{LEAN}/one", chain.zero_point]
    placed[chain.q] = [helper.make_node("QuantizeLinear", quantize, [chain.q])]
    dropped.update(n.output[0] for n in chain.dropped[:-1])


def _fuse_rows(chain: RowChain, placed: dict[str, list[NodeProto]], dropped: set[str]) -> None:
    """Row ranges (N,): QuantizeLinear and DequantizeLinear per row along axis 0."""
    keepdims = next((a for a in chain.reduce.attribute if a.name == "keepdims"), None)
    if keepdims is None:
        chain.reduce.attribute.append(helper.make_attribute("keepdims", 0))
    else:
        keepdims.i = 0
    x, scale, q = chain.x_div.input[0], chain.x_div.input[1], chain.q
    placed[q] = [
        helper.make_node("Shape", [scale], [f"{q}/rows"]),
        helper.make_node("Expand", [chain.zero_point, f"{q}/rows"], [f"{q}/zero_point"]),  # (N,)
        helper.make_node("QuantizeLinear", [x, scale, f"{q}/zero_point"], [q], axis=0),
    ]
    dropped.update(n.output[0] for n in [chain.x_div, *chain.dropped[:-1]])
    for cast, mul in chain.rescales:  # placed where the Mul was: its scale is computed after the Cast
        out_scale = next(i for i in mul.input if i != cast.output[0])
        placed[mul.output[0]] = [
            helper.make_node("DequantizeLinear", [cast.input[0], out_scale], [mul.output[0]], axis=0)
        ]
        dropped.add(cast.output[0])
