"""An int8 graph's per-row quantizations fused into two operators of our own, as the graph loads.

The batch-invariant int8 graphs (export/invariant_quant.py, export/lean_quant.py) quantize the input
of each MatMulInteger per row and rescale its product per row, in standard operators:

    range = Max(ReduceMax(Abs(x)), tiny)            (ReduceMax(x) for a ReLU's output)
    q     = QuantizeLinear(x, Div(range, levels), zero_point)    or, for rank 3,
            QuantizeLinear(Div(x, Div(range, levels)), 1, zero_point)
    acc   = MatMulInteger(q, w, zero_point, w_zero_point)
    y     = DequantizeLinear(acc, Div(range, divisor))  or  Mul(Cast(acc), Div(range, divisor))
    y     = Add(y, bias)                                 (where the graph adds one)

At one row most of a decoder step's ~360 nodes are this bookkeeping, each an onnxruntime dispatch
and a pass over a small tensor. `fuse_rows` rewrites each chain into attention_mt.RowQuant before
the product and attention_mt.RowDequant after it (service/engine/_ortops.c), which compute the same
values bit for bit; onnxruntime's MatMulInteger stays between them. The bundle on disk is not
changed: a process without the library or without the onnx package loads the graph as written and
gets the same results, slower.

A chain is fused only when nothing outside it reads its intermediate values; anything else in the
graph is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.engine.graph_view import DOMAIN, Graph, attribute, onnx_module, replaced


@dataclass(frozen=True)
class _Chain:
    removed: tuple[Any, ...]  # NodeProtos the fused node replaces
    fused: Any  # the NodeProto that replaces them, placed where the last of `removed` was
    produced: tuple[str, ...]  # names of `removed`'s outputs that `fused` produces


def _quantized_input(g: Graph, quantize: Any) -> tuple[str, Any, str, list[Any]] | None:
    """QuantizeLinear `quantize` in either spelling: (x, the Div making the scale, the scalar zero
    point, the nodes of the spelling), or None."""
    if len(quantize.input) != 3:
        return None
    expand = g.made_by(quantize.input[2], "Expand")
    if attribute(quantize, "axis", 1) == 0 and expand is not None:  # rows of a 2-D x
        scale, shape = g.made_by(quantize.input[1], "Div"), g.made_by(expand.input[1], "Shape")
        if scale is None or shape is None or shape.input[0] != scale.output[0]:
            return None
        return quantize.input[0], scale, expand.input[0], [expand, shape]
    scaled, one = g.made_by(quantize.input[0], "Div"), g.scalar(quantize.input[1])
    if scaled is None or one is None or float(one.item()) != 1.0:
        return None
    scale = g.made_by(scaled.input[1], "Div")  # any rank: x / scale, quantized with a scale of 1
    return (scaled.input[0], scale, quantize.input[2], [scaled]) if scale is not None else None


def _quantization(g: Graph, quantize: Any) -> _Chain | None:
    """The row quantization whose QuantizeLinear is `quantize`, as a RowQuant; None for another."""
    found = _quantized_input(g, quantize)
    if found is None:
        return None
    x, scale, zero_point, extra = found
    zp, made = g.scalar(zero_point), _row_range(g, scale.input[0])
    if made is None or g.scalar(scale.input[1]) is None or zp is None or zp.dtype != np.uint8:
        return None
    floor, reduce = made
    magnitude = g.made_by(reduce.input[0], "Abs")
    if magnitude is not None and magnitude.input[0] == x:
        extra.append(magnitude)
    elif not (reduce.input[0] == x and g.made_by(x, "Relu") is not None):
        return None  # a ReLU's output is its own magnitude
    node = onnx_module().helper.make_node(
        "RowQuant", [x, scale.input[1], zero_point, floor.input[1]], [quantize.output[0], floor.output[0]],
        name=f"{quantize.output[0]}/fused", domain=DOMAIN,
    )  # fmt: skip
    return _Chain((reduce, floor, scale, *extra, quantize), node, (quantize.output[0], floor.output[0]))


def _reduced_axes(g: Graph, reduce: Any) -> list[int] | None:
    """ReduceMax's axes, from its input (opset 18 on) or its attribute (before); None for all."""
    if len(reduce.input) == 2:
        axes = g.constant(reduce.input[1])
        return None if axes is None else [int(a) for a in np.ravel(axes)]
    for a in reduce.attribute:
        if a.name == "axes":
            return [int(i) for i in a.ints]
    return None


def _row_range(g: Graph, name: str) -> tuple[Any, Any] | None:
    """The Max and the ReduceMax making `name` when it is a row chain's range: Max(ReduceMax over the
    last axis, a scalar); None otherwise."""
    floor = g.made_by(name, "Max")
    if floor is None or g.scalar(floor.input[1]) is None:
        return None
    reduce = g.made_by(floor.input[0], "ReduceMax")
    return (floor, reduce) if reduce is not None and _reduced_axes(g, reduce) == [-1] else None


def _rescaling(g: Graph, product: Any) -> tuple[Any, list[Any]] | None:
    """The Div making the row scales MatMulInteger `product` is multiplied by, and the nodes that do
    it (DequantizeLinear, or Cast and Mul); None for another reader."""
    reader = g.only_consumer(product.output[0])
    if reader is None:
        return None
    if reader.op_type == "DequantizeLinear" and len(reader.input) == 2 and attribute(reader, "axis", 1) == 0:
        out_scale = g.made_by(reader.input[1], "Div")
        return (out_scale, [reader]) if out_scale is not None else None
    mul = g.only_consumer(reader.output[0]) if reader.op_type == "Cast" and attribute(reader, "to", 0) == 1 else None
    if mul is None or mul.op_type != "Mul":
        return None
    out_scale = g.made_by(mul.input[1] if mul.input[0] == reader.output[0] else mul.input[0], "Div")
    return (out_scale, [reader, mul]) if out_scale is not None else None


def _rescale(g: Graph, product: Any, divisors: dict[str, float]) -> _Chain | None:
    """The rescale of MatMulInteger `product` (and the bias added after it) as a RowDequant."""
    found = _rescaling(g, product)
    if found is None or _row_range(g, found[0].input[0]) is None:
        return None
    out_scale, removed = found
    divisor = g.made_by(out_scale.input[1], "Div")
    levels, weight_scale = (g.scalar(divisor.input[0]), g.scalar(divisor.input[1])) if divisor else (None, None)
    if divisor is None or levels is None or weight_scale is None:
        return None
    # the value onnxruntime folds the constant Div to: one float32 division
    name = f"{divisor.output[0]}/folded"
    divisors[name] = float(np.float32(levels.item()) / np.float32(weight_scale.item()))
    inputs, output = [product.output[0], out_scale.input[0], name], removed[-1].output[0]
    add = g.only_consumer(output)
    if add is not None and add.op_type == "Add":
        bias = add.input[1] if add.input[0] == output else add.input[0]
        if g.is_vector(bias, onnx_module().TensorProto.FLOAT):
            inputs.append(bias)
            removed.append(add)
            output = add.output[0]
    removed += [out_scale, divisor]
    node = onnx_module().helper.make_node("RowDequant", inputs, [output], name=f"{output}/fused", domain=DOMAIN)
    return _Chain(tuple(removed), node, (output,))


def _self_contained(g: Graph, chains: list[_Chain]) -> list[_Chain]:
    """The chains whose removed values nobody else reads, repeated until none drops out (a quantization
    whose range an unfused rescale still reads must stay, and then so must that rescale)."""
    while True:
        removed = {id(n) for c in chains for n in c.removed}
        kept = []
        for chain in chains:
            # a RowQuant's range has no keepdims axis where the encoder's had one: only fused nodes may read it
            hidden = [o for n in chain.removed for o in n.output if o not in chain.produced[:1]]
            readers = [r for o in hidden for r in g.consumers.get(o, [])]
            fused_readers = all(id(r) in removed for r in readers) and not any(o in g.outputs for o in hidden)
            if fused_readers:
                kept.append(chain)
        if len(kept) == len(chains):
            return kept
        chains = kept


def fuse_rows(model: Any) -> dict[str, int]:
    """Rewrite `model`'s row quantizations and rescales in place; the RowQuant and RowDequant nodes put in."""
    g = Graph(model.graph)
    divisors: dict[str, float] = {}
    chains = [c for n in g.graph.node if n.op_type == "QuantizeLinear" if (c := _quantization(g, n))]
    chains += [c for n in g.graph.node if n.op_type == "MatMulInteger" if (c := _rescale(g, n, divisors))]
    chains = _self_contained(g, chains)
    if not chains:
        return {}
    placed = {id(max(c.removed, key=lambda n: g.position[id(n)])): c.fused for c in chains}
    replaced(model, [n for c in chains for n in c.removed], placed)
    used = {i for n in model.graph.node for i in n.input}
    model.graph.initializer.extend(
        onnx_module().numpy_helper.from_array(np.array(v, np.float32), k) for k, v in divisors.items() if k in used
    )
    _recorded_shapes(model, chains)
    quantizations = sum(c.fused.op_type == "RowQuant" for c in chains)
    counts = {"RowQuant": quantizations, "RowDequant": len(chains) - quantizations}
    return {op: n for op, n in counts.items() if n}


def _recorded_shapes(model: Any, chains: list[_Chain]) -> None:
    """The graph's recorded shapes (value_info), kept as far as they hold: a range's goes, as RowQuant's
    drops the encoder's keepdims axis (graph_view.prune drops those of values no node makes now). Those
    of q and y stay, as the values are the same: a first version dropped them too, with the rest kept,
    and the shipped bundles' results changed in the last bits (a graph that records no shapes at all
    gives the same bits fused or not: tested)."""
    stale = {c.produced[1] for c in chains if len(c.produced) == 2}
    info = [v for v in model.graph.value_info if v.name not in stale]
    del model.graph.value_info[:]
    model.graph.value_info.extend(info)
