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
and a pass over a small tensor. `fused_graph` rewrites each chain into attention_mt.RowQuant before
the product and attention_mt.RowDequant after it (service/engine/_ortops.c), which compute the same
values bit for bit; onnxruntime's MatMulInteger stays between them. The bundle on disk is not
changed: a process without the library or without the onnx package loads the graph as written and
gets the same results, slower.

A chain is fused only when nothing outside it reads its intermediate values; anything else in the
graph is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

DOMAIN = "attention_mt"
_LIBRARY = "service.engine._ortops"


def library() -> str | None:
    """The path of the built operator library, or None: not built (no C compiler at install), or
    no onnx package to rewrite graphs with."""
    if importlib.util.find_spec("onnx") is None:
        return None
    spec = importlib.util.find_spec(_LIBRARY)
    return spec.origin if spec is not None and spec.origin else None


def release_freed_memory() -> None:
    """Hand the heap that reading and rewriting a graph freed back to the system (glibc's malloc_trim;
    elsewhere nothing). glibc keeps it otherwise: at OPUS-MT size, int8, a process held 259 MB after
    loading fused against 177 as written, and 170 with this."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any | None:
    """glibc's malloc_trim, looked up once (find_library runs ldconfig); None elsewhere."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None


@dataclass(frozen=True)
class FusedGraph:
    model: bytes  # the rewritten ModelProto, serialized, for onnxruntime to load from memory
    quantizations: int  # RowQuant nodes
    rescales: int  # RowDequant nodes


@dataclass(frozen=True)
class _Chain:
    removed: tuple[Any, ...]  # NodeProtos the fused node replaces
    fused: Any  # the NodeProto that replaces them, placed where the last of `removed` was
    produced: tuple[str, ...]  # names of `removed`'s outputs that `fused` produces


def _onnx() -> Any:
    """The onnx package, imported when a graph is fused: it costs a process ~0.6 s and 17 MB, which
    a server of fp32 models does not pay."""
    import onnx  # noqa: PLC0415
    import onnx.numpy_helper  # noqa: PLC0415

    return onnx


class _Graph:
    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[Any]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        # constants as TensorProtos, read into arrays only when a chain asks: the weights stay where they are
        self.tensors: dict[str, Any] = {i.name: i for i in graph.initializer}
        for n in graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.tensors[n.output[0]] = n.attribute[0].t
        self._read: dict[str, npt.NDArray[Any]] = {}
        self.outputs = {o.name for o in graph.output}
        self.position = {id(n): i for i, n in enumerate(graph.node)}

    def made_by(self, name: str, op: str) -> Any | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op else None

    def scalar(self, name: str) -> npt.NDArray[Any] | None:
        tensor = self.tensors.get(name)
        if tensor is None or int(np.prod(tensor.dims)) != 1:
            return None
        return self.constant(name)

    def constant(self, name: str) -> npt.NDArray[Any] | None:
        """An initializer's or Constant's value; None for another name, or for a table kept outside the
        graph (a shared weight, given to the session)."""
        tensor = self.tensors.get(name)
        if tensor is None or tensor.data_location == _onnx().TensorProto.EXTERNAL:
            return None
        if name not in self._read:
            self._read[name] = _onnx().numpy_helper.to_array(tensor)
        return self._read[name]

    def is_vector(self, name: str, dtype: int) -> bool:
        """A constant of rank 1 and this element type (TensorProto's), judged without reading it."""
        tensor = self.tensors.get(name)
        return tensor is not None and len(tensor.dims) == 1 and tensor.data_type == dtype

    def only_consumer(self, name: str) -> Any | None:
        readers = self.consumers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.outputs else None


def _attribute(node: Any, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _quantized_input(g: _Graph, quantize: Any) -> tuple[str, Any, str, list[Any]] | None:
    """QuantizeLinear `quantize` in either spelling: (x, the Div making the scale, the scalar zero
    point, the nodes of the spelling), or None."""
    if len(quantize.input) != 3:
        return None
    expand = g.made_by(quantize.input[2], "Expand")
    if _attribute(quantize, "axis", 1) == 0 and expand is not None:  # rows of a 2-D x
        scale, shape = g.made_by(quantize.input[1], "Div"), g.made_by(expand.input[1], "Shape")
        if scale is None or shape is None or shape.input[0] != scale.output[0]:
            return None
        return quantize.input[0], scale, expand.input[0], [expand, shape]
    scaled, one = g.made_by(quantize.input[0], "Div"), g.scalar(quantize.input[1])
    if scaled is None or one is None or float(one.item()) != 1.0:
        return None
    scale = g.made_by(scaled.input[1], "Div")  # any rank: x / scale, quantized with a scale of 1
    return (scaled.input[0], scale, quantize.input[2], [scaled]) if scale is not None else None


def _quantization(g: _Graph, quantize: Any) -> _Chain | None:
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
    node = _onnx().helper.make_node(
        "RowQuant", [x, scale.input[1], zero_point, floor.input[1]], [quantize.output[0], floor.output[0]],
        name=f"{quantize.output[0]}/fused", domain=DOMAIN,
    )  # fmt: skip
    return _Chain((reduce, floor, scale, *extra, quantize), node, (quantize.output[0], floor.output[0]))


def _reduced_axes(g: _Graph, reduce: Any) -> list[int] | None:
    """ReduceMax's axes, from its input (opset 18 on) or its attribute (before); None for all."""
    if len(reduce.input) == 2:
        axes = g.constant(reduce.input[1])
        return None if axes is None else [int(a) for a in np.ravel(axes)]
    for a in reduce.attribute:
        if a.name == "axes":
            return [int(i) for i in a.ints]
    return None


def _row_range(g: _Graph, name: str) -> tuple[Any, Any] | None:
    """The Max and the ReduceMax making `name` when it is a row chain's range: Max(ReduceMax over the
    last axis, a scalar); None otherwise."""
    floor = g.made_by(name, "Max")
    if floor is None or g.scalar(floor.input[1]) is None:
        return None
    reduce = g.made_by(floor.input[0], "ReduceMax")
    return (floor, reduce) if reduce is not None and _reduced_axes(g, reduce) == [-1] else None


def _rescaling(g: _Graph, product: Any) -> tuple[Any, list[Any]] | None:
    """The Div making the row scales MatMulInteger `product` is multiplied by, and the nodes that do
    it (DequantizeLinear, or Cast and Mul); None for another reader."""
    reader = g.only_consumer(product.output[0])
    if reader is None:
        return None
    if reader.op_type == "DequantizeLinear" and len(reader.input) == 2 and _attribute(reader, "axis", 1) == 0:
        out_scale = g.made_by(reader.input[1], "Div")
        return (out_scale, [reader]) if out_scale is not None else None
    mul = g.only_consumer(reader.output[0]) if reader.op_type == "Cast" and _attribute(reader, "to", 0) == 1 else None
    if mul is None or mul.op_type != "Mul":
        return None
    out_scale = g.made_by(mul.input[1] if mul.input[0] == reader.output[0] else mul.input[0], "Div")
    return (out_scale, [reader, mul]) if out_scale is not None else None


def _rescale(g: _Graph, product: Any, divisors: dict[str, float]) -> _Chain | None:
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
        if g.is_vector(bias, _onnx().TensorProto.FLOAT):
            inputs.append(bias)
            removed.append(add)
            output = add.output[0]
    removed += [out_scale, divisor]
    node = _onnx().helper.make_node("RowDequant", inputs, [output], name=f"{output}/fused", domain=DOMAIN)
    return _Chain(tuple(removed), node, (output,))


def _self_contained(g: _Graph, chains: list[_Chain]) -> list[_Chain]:
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


def fused_graph(path: Path, given: frozenset[str] = frozenset()) -> FusedGraph | None:
    """The graph at `path` with its row quantizations and rescales fused, or None when it has none.
    `given`: the initializers the session is given (shared weights), which may live outside the graph.
    Needs the onnx package (see `library`)."""
    onnx = _onnx()
    model = onnx.load(str(path), load_external_data=False)
    if any(i.data_location == onnx.TensorProto.EXTERNAL and i.name not in given for i in model.graph.initializer):
        return None  # weights beside the graph: loaded from memory, it could not find them
    g = _Graph(model.graph)
    divisors: dict[str, float] = {}
    chains = [c for n in g.graph.node if n.op_type == "QuantizeLinear" if (c := _quantization(g, n))]
    chains += [c for n in g.graph.node if n.op_type == "MatMulInteger" if (c := _rescale(g, n, divisors))]
    chains = _self_contained(g, chains)
    if not chains:
        return None
    # each fused node where the last node it replaces was: its inputs are made before that, and what
    # reads its outputs comes after
    placed = {id(max(c.removed, key=lambda n: g.position[id(n)])): c.fused for c in chains}
    removed = {id(n) for c in chains for n in c.removed}
    nodes = [placed.get(id(n), n) for n in g.graph.node if id(n) not in removed or id(n) in placed]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    model.graph.initializer.extend(
        onnx.numpy_helper.from_array(np.array(v, np.float32), k) for k, v in divisors.items() if k in used
    )
    _prune(model, used)
    _recorded_shapes(model, chains)
    model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    quantizations = sum(c.fused.op_type == "RowQuant" for c in chains)
    return FusedGraph(model.SerializeToString(), quantizations, len(chains) - quantizations)


def _recorded_shapes(model: Any, chains: list[_Chain]) -> None:
    """The graph's recorded shapes (value_info), kept as far as they hold. Those of values no node
    makes now go, and a range's (RowQuant's drops the encoder's keepdims axis). Those of q and y stay,
    as the values are the same: a first version dropped them too, with the rest kept, and the shipped
    bundles' results changed in the last bits (a graph that records no shapes at all gives the same
    bits fused or not: tested)."""
    stale = {o for c in chains for n in c.removed for o in n.output} - {o for c in chains for o in c.produced}
    stale |= {c.produced[1] for c in chains if len(c.produced) == 2}
    info = [v for v in model.graph.value_info if v.name not in stale]
    del model.graph.value_info[:]
    model.graph.value_info.extend(info)


def _prune(model: Any, used: set[str]) -> None:
    """Drop the initializers and Constant nodes only the removed nodes read (onnxruntime warns of
    each unused initializer at every load)."""
    graph = model.graph
    keep = used | {o.name for o in graph.output}
    inputs = {i.name for i in graph.input}
    initializers = [i for i in graph.initializer if i.name in keep or i.name in inputs]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    nodes = [n for n in graph.node if n.op_type != "Constant" or n.output[0] in keep]
    del graph.node[:]
    graph.node.extend(nodes)
