"""Batch-invariant graphs: a sentence gets the same tokens and scores whatever it is batched with.

Two things made a row's result depend on the other rows of its batch:

1. onnxruntime's dynamic quantization (`quantize_dynamic`) quantizes each MatMul's activation
   with one scale for the whole tensor (DynamicQuantizeLinear), so one long or loud sentence
   changes every other sentence's rounding. `per_row` rewrites each such MatMul to quantize every
   row with its own scale. The int8 weights times their scales are the model's weights, so the
   rewrite keeps them exactly (same values, same file size); only the activation side changes.
2. Sums over the source axis, which batching pads with zeros, were not always added in the same
   order. ReduceSum's order depends on the length: `make_padding_invariant` turns such sums into
   MatMuls, which add in order (fp32 graphs too). onnxruntime's one-row MatMul kernels (a decoder
   step's attention over the source and over the cache's slots) sum by where a value falls in
   blocks of 4, so a row alone and the same row in a wider batch agree bit for bit only when every
   width is a multiple of 4: the service pads sources and caches to multiples of 8
   (service/engine/onnx_model.py, SOURCE_CHUNK and CACHE_CHUNK). Graphs exported before that gave
   each such MatMul a second row (onnxruntime's general kernel adds in order at any width); taking
   it away made a decoder step 1.07-1.13x faster, and `make_padding_invariant` does.

`weight_only` and `nbits` are the other batch-invariant forms measured against `per_row`
(benchmarks/quant_invariance.py, docs/benchmarks.md); exports use `per_row`.
Embedding Gathers (int8 rows -> DequantizeLinear) are per row already and stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import onnx
from onnx import NodeProto, TensorProto, helper, numpy_helper

from service.engine.manifest import CACHE_AXIS, SOURCE_AXIS

MS_DOMAIN = "com.microsoft"
ROW_QUANT = "/row_quant"  # prefix of the constants per_row adds
PAD_ROWS = "/pad_rows"  # prefix of the constants and tensors make_padding_invariant adds
PADDED_AXIS = SOURCE_AXIS  # the axis batching pads
# ... and a fixed-width KV cache's slot axis, whose unwritten slots are padding too
PADDED_AXES = (PADDED_AXIS, CACHE_AXIS)


class RewriteError(ValueError):
    """The graph is not laid out as onnxruntime's dynamic quantization writes it."""


@dataclass(frozen=True)
class QuantizedMatMul:
    """One `DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul` chain of quantize_dynamic, or a
    per-row one (its rescale possibly one DequantizeLinear, export/lean_quant.py)."""

    activation: str  # float input (..., K)
    weight: str  # int8 initializer (K, N)
    weight_scale: str  # scalar initializer
    weight_zero_point: str  # scalar initializer (0 for QInt8)
    output: str  # float output (..., N)
    chain: tuple[NodeProto, ...]  # the MatMulInteger to the float output: what a rewrite replaces


class Graph:
    """A graph indexed by the tensors its nodes produce and read, and what a rewrite has added."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.inits = {i.name: i for i in graph.initializer}
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[NodeProto]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.row_quantized: set[str] = set()  # activations already quantized row by row
        self.zero_points: dict[str, int] = {}  # weight zero points as they were before the rewrite
        self.signed: set[str] = set()  # weights rewritten to int8 around 0 already

    def only_consumer(self, name: str, op_type: str) -> NodeProto:
        users = self.consumers.get(name, [])
        if len(users) != 1 or users[0].op_type != op_type:
            raise RewriteError(f"{name}: expected one {op_type} reader, found {[u.op_type for u in users]}")
        return users[0]

    def array(self, name: str) -> npt.NDArray[np.generic]:
        return numpy_helper.to_array(self.inits[name])

    def add_constant(self, name: str, value: npt.NDArray[np.generic]) -> str:
        if name not in self.inits:
            self.inits[name] = numpy_helper.from_array(value, name)
            self.graph.initializer.append(self.inits[name])
        return name


Builder = Callable[[QuantizedMatMul, Graph], list[NodeProto]]
Shapes = dict[str, list[str | int]]  # dims by tensor name, symbols by name


def find_quantized_matmuls(graph: onnx.GraphProto) -> list[QuantizedMatMul]:
    """Every int8 MatMul of `graph`, in node order: quantize_dynamic's (per tensor) or per_row's."""
    g = Graph(graph)
    found = []
    for node in graph.node:
        if node.op_type != "MatMulInteger":
            continue
        if node.input[1] not in g.inits or len(node.input) < 4:
            raise RewriteError(f"{node.name}: its weight is not an initializer with a zero point")
        chain, scales = _rescale_chain(node, g)
        dql = g.producer.get(node.input[0])
        if dql is not None and dql.op_type == "DynamicQuantizeLinear":  # Mul(x_scale, w_scale)
            activation, w_scale = dql.input[0], next(i for i in scales.input if i != dql.output[1])
        elif node.input[0].endswith(f"{ROW_QUANT}/q"):  # Div(row_range, Div(levels, w_scale))
            activation, w_scale = node.input[0].removesuffix(f"{ROW_QUANT}/q"), g.producer[scales.input[1]].input[1]
        else:
            raise RewriteError(f"{node.name}: its activation is neither per tensor nor per row")
        found.append(QuantizedMatMul(activation, node.input[1], w_scale, node.input[3], chain[-1].output[0], chain))
    return found


def _rescale_chain(matmul: NodeProto, g: Graph) -> tuple[tuple[NodeProto, ...], NodeProto]:
    """The nodes from a MatMulInteger to its float output, and the node giving its scale:
    Cast -> Mul(scale), or export/lean_quant.py's DequantizeLinear(scale)."""
    users = g.consumers.get(matmul.output[0], [])
    if len(users) == 1 and users[0].op_type == "DequantizeLinear":
        return (matmul, users[0]), g.producer[users[0].input[1]]
    cast = g.only_consumer(matmul.output[0], "Cast")
    mul = g.only_consumer(cast.output[0], "Mul")
    return (matmul, cast, mul), g.producer[next(i for i in mul.input if i != cast.output[0])]


def rewrite_matmuls(model: onnx.ModelProto, builder: Builder) -> onnx.ModelProto:
    """A copy of `model` with every dynamic-int8 MatMul rebuilt by `builder`; what nothing reads goes."""
    model = copy_model(model)
    graph = model.graph
    g = Graph(graph)
    matmuls = find_quantized_matmuls(graph)
    # Nodes are keyed by their first output (protobuf hands out a new wrapper on every access). The
    # new nodes go where the MatMulInteger was: its inputs exist there, and it precedes every reader.
    replaced = {n.output[0] for m in matmuls for n in m.chain}
    new_nodes = {m.chain[0].output[0]: builder(m, g) for m in matmuls}
    nodes: list[NodeProto] = []
    for node in graph.node:
        if node.output[0] in new_nodes:
            nodes += new_nodes[node.output[0]]
        elif node.output[0] not in replaced:
            nodes.append(node)
    replace_nodes(graph, nodes)
    prune(graph)
    left = [n.name or n.output[0] for n in graph.node if n.op_type == "DynamicQuantizeLinear"]
    if left:
        raise RewriteError(f"still quantized per tensor: {left}")
    if any(n.domain == MS_DOMAIN for n in graph.node) and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return model


def batch_invariant(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` made batch-invariant: dynamic-int8 MatMuls per row (a first per_row graph in today's
    seven-bit form), sums over the padded axis in order."""
    if per_tensor(model):
        model = rewrite_matmuls(model, per_row)
    elif first_per_row(model):
        model = seven_bit_per_row(model)
    else:
        model = copy_model(model)
    for axis in PADDED_AXES:
        make_padding_invariant(model, axis)
    return model


def per_tensor(model: onnx.ModelProto) -> bool:
    """Whether `model` quantizes activations per tensor (quantize_dynamic's DynamicQuantizeLinear)."""
    return any(n.op_type == "DynamicQuantizeLinear" for n in model.graph.node)


# --- per-row activation scales (what exports use) --------------------------------------------


def per_row(m: QuantizedMatMul, g: Graph) -> list[NodeProto]:
    """x (..., K) quantized with one scale per row; y = (q - zq) @ W_s8 in int32, times the row's
    range over its levels and the weight's scale. Each row uses only its own values.

    uint8 activations below 128 against the int8 weight: onnxruntime's u8s8 kernel is its fastest
    (2.1x its u8u8 kernel at 32 rows here), and with activations under 128 its AVX2 path, which adds
    pairs of u8 x s8 products in saturating 16 bits, cannot saturate (127 * 128 * 2 = 32,512 <
    32,767): the same exact result on AVX2, AVX-512 and VNNI machines."""
    nodes, q, row_range, zero_point, levels = _row_quantized(m.activation, g)  # shared by q, k and v
    weight, weight_zero_point = _signed_weight(m.weight, m.weight_zero_point, g)
    p = f"{m.output}{ROW_QUANT}"
    # out_scale = range / (levels / w_scale), with Divs: onnxruntime fuses Cast -> Mul(Mul(a_scale,
    # b_scale)) -> Add(bias) into MatMulIntegerToFloat, whose kernel is wrong for a per-row a_scale with
    # a bias (10% errors here). The weight's scale stays in the graph: `import-bundle` reads it.
    return [
        *nodes,
        helper.make_node("Div", [f"{ROW_QUANT}/{levels}", m.weight_scale], [f"{p}/divisor"]),  # folded at load
        helper.make_node("MatMulInteger", [q, weight, zero_point, weight_zero_point], [f"{p}/int32"]),  # (..., N)
        helper.make_node("Cast", [f"{p}/int32"], [f"{p}/float"], to=TensorProto.FLOAT),
        helper.make_node("Div", [row_range, f"{p}/divisor"], [f"{p}/out_scale"]),  # (..., 1)
        helper.make_node("Mul", [f"{p}/float", f"{p}/out_scale"], [m.output]),
    ]


def _row_quantized(x: str, g: Graph) -> tuple[list[NodeProto], str, str, str, int]:
    """Nodes quantizing x (..., K) row by row, the first time x is seen; the names of q, the rows'
    ranges (..., 1) and the zero point, and how many levels a range spans.

    Seven bits, so that q < 128 (see per_row). Symmetric: q = round(x / s) + 64, s = max|x| / 63. A
    ReLU's output is never negative, so it takes all 128 levels instead: q = round(x / s),
    s = max x / 127 (what asymmetric quantization would pick for it)."""
    p = f"{x}{ROW_QUANT}"
    producer = g.producer.get(x)
    unsigned = producer is not None and producer.op_type == "Relu"
    q, scale, row_range = f"{p}/q", f"{p}/scale", f"{p}/range"
    zero_point, levels = (f"{ROW_QUANT}/u8_0", 127) if unsigned else (f"{ROW_QUANT}/u8_64", 63)
    if x in g.row_quantized:
        return [], q, row_range, zero_point, levels
    g.row_quantized.add(x)
    _add_row_constants(g)
    magnitude = x if unsigned else f"{p}/abs"
    nodes = [] if unsigned else [helper.make_node("Abs", [x], [magnitude])]
    nodes += [
        helper.make_node("ReduceMax", [magnitude, f"{ROW_QUANT}/last_axis"], [f"{p}/max"]),  # (..., 1)
        helper.make_node("Max", [f"{p}/max", f"{ROW_QUANT}/tiny"], [row_range]),  # an all-zero row
        helper.make_node("Div", [row_range, f"{ROW_QUANT}/{levels}"], [scale]),  # (..., 1)
        helper.make_node("Div", [x, scale], [f"{p}/scaled"]),  # (..., K) in [-63, 63] or [0, 127]
        helper.make_node("Round", [f"{p}/scaled"], [f"{p}/rounded"]),
    ]
    if not unsigned:
        nodes.append(helper.make_node("Add", [f"{p}/rounded", f"{ROW_QUANT}/64"], [f"{p}/shifted"]))
    nodes.append(helper.make_node("Cast", [nodes[-1].output[0]], [q], to=TensorProto.UINT8))
    return nodes, q, row_range, zero_point, levels


def _add_row_constants(g: Graph) -> None:
    g.add_constant(f"{ROW_QUANT}/last_axis", np.array([-1], np.int64))
    g.add_constant(f"{ROW_QUANT}/tiny", np.array(1e-30, np.float32))
    for value in (63, 64, 127):
        g.add_constant(f"{ROW_QUANT}/{value}", np.array(value, np.float32))
    g.add_constant(f"{ROW_QUANT}/u8_0", np.array(0, np.uint8))
    g.add_constant(f"{ROW_QUANT}/u8_64", np.array(64, np.uint8))


def _signed_weight(name: str, zero_point_name: str, g: Graph) -> tuple[str, str]:
    """The weight as int8 with zero point 0 (the same values), under the same names: `import-bundle`
    reads any quantized weight back as (q - zero_point) * scale. quantize_dynamic's QInt8 weights
    are that already; the uint8 weights of the first per_row graphs (shifted by 128) become it."""
    if name in g.signed:  # one weight read by several MatMuls
        return name, zero_point_name
    g.signed.add(name)
    weight = g.inits[name]
    readers = {n.op_type for n in g.consumers[name]}
    if readers != {"MatMulInteger"}:
        raise RewriteError(f"{name}: also read by {sorted(readers - {'MatMulInteger'})}")
    zero_point = g.zero_points.setdefault(zero_point_name, int(g.array(zero_point_name)))
    w = g.array(name).astype(np.int16) - zero_point  # (K, N)
    if w.min() < -128 or w.max() > 127:
        raise RewriteError(f"{name}: values {w.min()}..{w.max()} do not fit int8 around zero point 0")
    if weight.data_type != TensorProto.INT8 or zero_point != 0:
        weight.CopyFrom(numpy_helper.from_array(w.astype(np.int8), name))
        g.inits[zero_point_name].CopyFrom(numpy_helper.from_array(np.array(0, np.int8), zero_point_name))
    return name, zero_point_name


# --- the per_row graphs first shipped (8-bit activations, uint8 weights) --------------------------

# their constants, and what replaces each: rows spanned 127 levels (ReLU rows 255), shifted by 128
FIRST_PER_ROW = {
    f"{ROW_QUANT}/127": f"{ROW_QUANT}/63",
    f"{ROW_QUANT}/255": f"{ROW_QUANT}/127",
    f"{ROW_QUANT}/128": f"{ROW_QUANT}/64",
    f"{ROW_QUANT}/u8_128": f"{ROW_QUANT}/u8_64",
}


def first_per_row(model: onnx.ModelProto) -> bool:
    """Whether `model` is a per_row graph as first shipped: uint8 x uint8, 8-bit activations."""
    return any(i.name == f"{ROW_QUANT}/u8_128" for i in model.graph.initializer)


def seven_bit_per_row(model: onnx.ModelProto) -> onnx.ModelProto:
    """A first per_row graph in today's form: the same int8 weights (stored signed), each row's
    activation quantized to 7 bits instead of 8 (u8 x s8, see per_row). Every row-quantize chain and
    every rescale reads the same level constants, so renaming them (in one pass, each input once)
    changes all of them consistently."""
    model = copy_model(model)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = FIRST_PER_ROW.get(name, name)
    g = Graph(model.graph)
    _add_row_constants(g)
    for node in model.graph.node:
        if node.op_type == "MatMulInteger" and node.input[1] in g.inits:
            _signed_weight(node.input[1], node.input[3], g)
    prune(model.graph)
    return model


# --- the forms measured against it ---------------------------------------------------------------


def weight_only(m: QuantizedMatMul, g: Graph) -> list[NodeProto]:
    """int8 on disk, fp32 arithmetic. Cast, Sub and Mul, not DequantizeLinear: onnxruntime folds them
    into an fp32 weight when the session loads, while it turns DequantizeLinear -> MatMul into a
    MatMulNBits with int8 compute (the `nbits` form, in 32-value blocks)."""
    w = f"{m.weight}/float"
    return [
        helper.make_node("Cast", [m.weight], [f"{w}/cast"], to=TensorProto.FLOAT),
        helper.make_node("Cast", [m.weight_zero_point], [f"{w}/zero_point"], to=TensorProto.FLOAT),
        helper.make_node("Sub", [f"{w}/cast", f"{w}/zero_point"], [f"{w}/centred"]),
        helper.make_node("Mul", [f"{w}/centred", m.weight_scale], [w]),  # (K, N)
        helper.make_node("MatMul", [m.activation, w], [m.output]),
    ]


def nbits(m: QuantizedMatMul, g: Graph) -> list[NodeProto]:
    """com.microsoft MatMulNBits, 8 bits, int8 compute (accuracy_level 4): the kernel quantizes each
    row's activation block by block itself. The weight (K, N) becomes (N, K / block, block) uint8 with
    the default zero point 128, every block with the tensor's scale: the same values."""
    w = g.array(m.weight).astype(np.int16) - int(g.array(m.weight_zero_point))  # (K, N)
    K, N = w.shape
    block = next((b for b in (256, 128, 64, 32, 16) if K % b == 0), 0)
    if not block:
        raise RewriteError(f"{m.weight}: MatMulNBits needs K divisible by 16, got {K}")
    packed = g.add_constant(f"{m.weight}/nbits", (w.T + 128).astype(np.uint8).reshape(N, K // block, block))
    scales = np.full(N * (K // block), float(g.array(m.weight_scale)), np.float32)
    scale = g.add_constant(f"{m.weight}/nbits_scales", scales)
    node = helper.make_node(
        "MatMulNBits", [m.activation, packed, scale], [m.output], domain=MS_DOMAIN, K=K, N=N, bits=8, block_size=block
    )
    node.attribute.append(helper.make_attribute("accuracy_level", 4))
    return [node]


# --- sums over the padded axis ----------------------------------------------------------------


def padding_invariant(model: onnx.ModelProto, padded_axis: str = PADDED_AXIS) -> onnx.ModelProto:
    """A copy of `model` whose sums over the padded axis add in order (see make_padding_invariant)."""
    model = copy_model(model)
    make_padding_invariant(model, padded_axis)
    return model


def make_padding_invariant(model: onnx.ModelProto, padded_axis: str = PADDED_AXIS) -> None:
    """In place: ReduceSums over the padded axis become MatMuls, which add in order; MatMuls given a
    second row by an earlier export lose it (the widths the service gives make one row exact: see
    the module's docstring). Idempotent."""
    shapes = inferred_shapes(model)  # once: for a 300 MB graph it costs seconds
    _sums_as_matmuls(model.graph, shapes, padded_axis)
    _single_rows(model.graph)


SECOND_ROW = f"{PAD_ROWS}/first"  # an earlier export's copy of a MatMul's first row


def second_rows(model: onnx.ModelProto) -> bool:
    """Whether `model` has MatMuls given a second row by an earlier export."""
    return any(n.op_type == "Slice" and n.output[0].endswith(SECOND_ROW) for n in model.graph.node)


def _single_rows(graph: onnx.GraphProto) -> None:
    """Each `Slice(a, first row) -> Concat(a, it) -> MatMul -> Slice(all but the last row)` of an
    earlier export back to `MatMul(a)`. (A ReduceSum's MatMul, `_sum_by_matmul`, has two rows of
    ones, not a copied row, and stays.)"""
    g = Graph(graph)
    dropped: set[str] = set()  # output names of the nodes that go
    for first in [n for n in graph.node if n.op_type == "Slice" and n.output[0].endswith(SECOND_ROW)]:
        concat = g.only_consumer(first.output[0], "Concat")
        matmul = g.only_consumer(concat.output[0], "MatMul")
        back = g.only_consumer(matmul.output[0], "Slice")
        dropped |= {concat.output[0], first.output[0], back.output[0]}
        matmul.input[0], matmul.output[0] = concat.input[0], back.output[0]
    if dropped:
        replace_nodes(graph, [n for n in graph.node if n.op_type == "MatMul" or n.output[0] not in dropped])
        prune(graph)


def _sums_as_matmuls(graph: onnx.GraphProto, shapes: Shapes, padded_axis: str) -> None:
    """Each ReduceSum of x (B, S, D) over the padded axis S: ones (B, 2, S) @ x, first row."""
    values = _constant_values(graph)
    targets = {
        n.output[0]
        for n in graph.node
        if n.op_type == "ReduceSum"
        and len(shapes.get(n.input[0], [])) == 3
        and len(n.input) > 1
        and n.input[1] in values
        and [int(v) % 3 for v in values[n.input[1]].ravel()] == [1]
        and shapes[n.input[0]][1] == padded_axis
    }
    if targets:
        _add_pad_constants(Graph(graph), ones=True)
        replace_nodes(graph, [m for n in graph.node for m in (_sum_by_matmul(n) if n.output[0] in targets else [n])])


def _sum_by_matmul(reduce_sum: NodeProto) -> list[NodeProto]:
    x, y, p = reduce_sum.input[0], reduce_sum.output[0], PAD_ROWS
    keepdims = next((a.i for a in reduce_sum.attribute if a.name == "keepdims"), 1)
    q = f"{y}{p}"
    nodes = [
        helper.make_node("Shape", [x], [f"{q}/bs"], end=2),  # [B, S]
        helper.make_node("Concat", [f"{q}/bs", f"{p}/1"], [f"{q}/shape"], axis=0),  # [B, S, 1]
        helper.make_node("Expand", [f"{p}/ones", f"{q}/shape"], [f"{q}/ones"]),  # (B, S, 1)
        helper.make_node("Transpose", [f"{q}/ones"], [f"{q}/row"], perm=[0, 2, 1]),  # (B, 1, S)
        helper.make_node("Concat", [f"{q}/row", f"{q}/row"], [f"{q}/a"], axis=-2),  # (B, 2, S)
        helper.make_node("MatMul", [f"{q}/a", x], [f"{q}/y"]),  # (B, 2, D)
        helper.make_node("Slice", [f"{q}/y", f"{p}/0", f"{p}/1", f"{p}/-2"], [y if keepdims else f"{q}/sum"]),
    ]
    if not keepdims:
        nodes.append(helper.make_node("Squeeze", [f"{q}/sum", f"{p}/-2"], [y]))  # (B, D)
    return nodes


def pad_constants() -> dict[str, npt.NDArray[np.generic]]:
    """The constants `_sum_by_matmul` reads, by name."""
    return {f"{PAD_ROWS}/{value}": np.array([value], np.int64) for value in (0, 1, -1, -2)}


def _add_pad_constants(g: Graph, ones: bool = False) -> None:
    for name, value in pad_constants().items():
        g.add_constant(name, value)
    if ones:
        g.add_constant(f"{PAD_ROWS}/ones", np.ones((1, 1, 1), np.float32))


def inferred_shapes(model: onnx.ModelProto) -> Shapes:
    """Each tensor's dims by ONNX shape inference from the graph's declared inputs (names for symbols)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


def _constant_values(graph: onnx.GraphProto) -> dict[str, npt.NDArray[np.generic]]:
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return values


# --- graph plumbing ----------------------------------------------------------------------------


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def replace_nodes(graph: onnx.GraphProto, nodes: list[NodeProto]) -> None:
    del graph.node[:]
    graph.node.extend(nodes)


def prune(graph: onnx.GraphProto) -> None:
    """Drop nodes whose outputs nothing reads, then initializers nothing reads."""
    outputs = {o.name for o in graph.output}
    while True:
        read = outputs | {i for n in graph.node for i in n.input}
        live = [n for n in graph.node if any(o in read for o in n.output)]
        if len(live) == len(graph.node):
            break
        replace_nodes(graph, live)
    read = outputs | {i for n in graph.node for i in n.input}
    kept = [i for i in graph.initializer if i.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
