"""A decoder step's attentions fused into two operators of our own, as the graph loads.

The step graph (export/step_graph.py) spells each attention over heads of one row, (B, N, 1, D):

    cross:  weights = Softmax(Where(blocked, -inf, Div(MatMul(Reshape(q), Transpose(key)), scale)))
            mixed   = Reshape(MatMul(weights, value), (B, H))
    self:   the same over the cache, with this step's own score in the row's slot
            (Where(own, q.k, q.past_key)), its weight split off (ReduceSum(Mul(weights, own)) and
            Where(own, 0, weights)) and its value added last (Add(MatMul(past, past_value), own * v))

and both hand their weights on as Reshape(weights, (B, 1, N, X)). At one row that is 26 nodes a
layer, each an onnxruntime dispatch and a small pass, plus a copy of each layer's cache keys a step
for the Transpose. `fuse_attention` rewrites each attention into attention_mt.CrossAttention or
attention_mt.CacheAttention (service/engine/ortops_attention.c), which compute the same to rounding,
read the caches where they are, and keep every row's bits whatever it is batched with.

Every node, constant and input of the pattern is checked; an attention that differs anywhere (another
mask, another scale, a reader of an intermediate value) is left as it is.

When the fused CrossAttentions are all that read the source's keys and values, `index_sources` (run
by graph_fusion once the dead nodes are gone) gives the graph SOURCE_ROWS, (B,) int64: the row of the
keys and values each row reads, whose batch axis is then SOURCES (as many as there are sentences, not
rows). The engine keeps one copy of each sentence's keys and values for all its beams, instead of
copying them out to every beam and reading each copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.engine.graph_view import DOMAIN, Graph, attribute, ints_attribute, onnx_module, replaced

SOURCE_ROWS = "attention_mt.source_rows"  # the graph input added when the sources are indexed
SOURCES = "attention_mt.sources"  # the batch axis of keys and values read through SOURCE_ROWS
SWAP_LAST = [0, 1, 3, 2]
INT64, BOOL = 7, 9  # TensorProto element types
SOFTMAX_LAST_AXIS = 13  # the opset from which Softmax's axis is one axis (before: all from it on)


@dataclass(frozen=True)
class _Match:
    removed: tuple[Any, ...]  # the nodes the fused one replaces
    fused: Any  # the node that replaces them, placed where the last of `removed` was


@dataclass(frozen=True)
class _Scores:
    """Softmax(Where(blocked, -inf, Div(raw, scale))): what the two attentions share."""

    softmax: Any
    where: Any
    div: Any
    raw: str  # the scores before scaling
    scale: str
    blocked: str


def _scores(g: Graph, softmax: Any) -> _Scores | None:
    if attribute(softmax, "axis", -1) != -1:
        return None
    where = g.made_by(softmax.input[0], "Where")
    minus_inf = g.scalar(where.input[1]) if where is not None else None
    if where is None or minus_inf is None or not np.isneginf(minus_inf).all():
        return None
    div = g.made_by(where.input[2], "Div")
    if div is None or g.scalar(div.input[1]) is None:
        return None
    return _Scores(softmax, where, div, div.input[0], div.input[1], where.input[0])


def _unsqueezed(g: Graph, name: str, axes: list[int]) -> str | None:
    """x where `name` is Unsqueeze(x, axes), else None."""
    node = g.made_by(name, "Unsqueeze")
    if node is None:
        return None
    found = ints_attribute(node, "axes") if len(node.input) == 1 else g.constant(node.input[1])
    return node.input[0] if found is not None and [int(a) for a in np.ravel(found)] == axes else None


def _reshaped(g: Graph, name: str, shape: list[int]) -> str | None:
    """x where `name` is Reshape(x, shape) by that constant, else None."""
    node = g.made_by(name, "Reshape")
    if node is None:
        return None
    target = g.constant(node.input[1])
    return str(node.input[0]) if target is not None and [int(d) for d in np.ravel(target)] == shape else None


def _transposed_input(g: Graph, name: str) -> str | None:
    """The graph input x where `name` is Transpose(x) over its last two axes, else None."""
    node = g.made_by(name, "Transpose")
    if node is None or ints_attribute(node, "perm") != SWAP_LAST or node.input[0] not in g.inputs:
        return None
    return str(node.input[0])


def _input_of(g: Graph, name: str, dtype: int) -> bool:
    """Whether `name` is a graph input of this element type (TensorProto's)."""
    return name in g.inputs and g.inputs[name].type.tensor_type.elem_type == dtype


def _heads(g: Graph, key: str) -> tuple[int, int] | None:
    """(N, D) of a (B, N, X, D) graph input with both fixed."""
    dims = g.inputs[key].type.tensor_type.shape.dim
    if len(dims) != 4 or not (dims[1].dim_value and dims[3].dim_value):
        return None
    return int(dims[1].dim_value), int(dims[3].dim_value)


def _readers(g: Graph, name: str) -> dict[str, Any] | None:
    """The nodes reading `name`, by op type, when no two share one and it is no graph output."""
    readers = g.consumers.get(name, [])
    by_op = {r.op_type: r for r in readers}
    return by_op if len(by_op) == len(readers) and name not in g.outputs else None


def _sole(g: Graph, name: str, op: str) -> Any | None:
    reader = g.only_consumer(name)
    return reader if reader is not None and reader.op_type == op else None


def _outputs(g: Graph, by_layer: Any, weights: str, mixed: str, heads: tuple[int, int]) -> Any | None:
    """The Reshape handing on the mixed heads as (B, H), when `by_layer` hands on the weights as
    (B, 1, N, X); None otherwise."""
    n, d = heads
    rows = _sole(g, mixed, "Reshape")
    if rows is None or _reshaped(g, by_layer.output[0], [0, 1, n, -1]) != weights:
        return None
    return rows if _reshaped(g, rows.output[0], [-1, n * d]) == mixed else None


def _cross(g: Graph, s: _Scores) -> _Match | None:
    """CrossAttention(q, key, value, mask, scale) for the attention whose scores `s` are, or None."""
    mm = g.made_by(s.raw, "MatMul")
    key = _transposed_input(g, mm.input[1]) if mm is not None else None
    mask = _unsqueezed(g, s.blocked, [1, 2])
    if mm is None or key is None or mask is None or not _input_of(g, mask, BOOL):
        return None
    heads = _heads(g, key)
    q = _reshaped(g, mm.input[0], [-1, heads[0], 1, heads[1]]) if heads else None
    readers = _readers(g, s.softmax.output[0])
    if heads is None or q is None or readers is None or set(readers) != {"MatMul", "Reshape"}:
        return None
    mix, by_layer = readers["MatMul"], readers["Reshape"]
    if mix.input[0] != s.softmax.output[0] or mix.input[1] not in g.inputs or _heads(g, mix.input[1]) != heads:
        return None
    rows = _outputs(g, by_layer, s.softmax.output[0], mix.output[0], heads)
    if rows is None:
        return None
    node = onnx_module().helper.make_node(
        "CrossAttention", [q, key, mix.input[1], mask, s.scale], [rows.output[0], by_layer.output[0]],
        name=f"{rows.output[0]}/fused", domain=DOMAIN,
    )  # fmt: skip
    return _Match((s.softmax, s.where, s.div, mm, mix, by_layer, rows), node)


@dataclass(frozen=True)
class _CacheMasks:
    """Unsqueeze(Greater(slots, positions)) and Unsqueeze(Equal(slots, positions)), (B, 1, 1, P), where
    slots = Range(0, P) over a cache input's slot axis."""

    positions: str  # the graph input
    slot_axis_of: str  # the graph input whose axis 2 P is


def _cache_masks(g: Graph, blocked: str, own: str) -> _CacheMasks | None:
    later = g.made_by(_unsqueezed(g, blocked, [1, 2]) or "", "Greater")
    here = g.made_by(_unsqueezed(g, own, [1, 2]) or "", "Equal")
    if later is None or here is None or list(later.input) != list(here.input):
        return None
    slots, column = g.made_by(later.input[0], "Range"), _unsqueezed(g, later.input[1], [1])
    if slots is None or column is None or not _input_of(g, column, INT64):
        return None
    start, step = g.scalar(slots.input[0]), g.scalar(slots.input[2])
    squeeze = g.made_by(slots.input[1], "Squeeze")
    shape = g.made_by(squeeze.input[0], "Shape") if squeeze is not None else None
    if start is None or step is None or start.item() != 0 or step.item() != 1 or shape is None:
        return None
    span = (attribute(shape, "start", 0), attribute(shape, "end", -1))
    return _CacheMasks(column, shape.input[0]) if span == (2, 3) and shape.input[0] in g.inputs else None


def _same_slots(g: Graph, a: str, b: str) -> bool:
    """Whether graph inputs a and b have the same axis 2 (the cache's slots)."""
    da, db = (g.inputs[x].type.tensor_type.shape.dim for x in (a, b))
    return len(da) > 2 and len(db) > 2 and da[2] == db[2] and bool(da[2].dim_param or da[2].dim_value)


def _own_weight(g: Graph, mul: Any, own: str, weights: str) -> Any | None:
    """ReduceSum(Mul(weights, Cast(own)), -1, keepdims): the weight of the row's own slot."""
    cast = g.made_by(mul.input[1] if mul.input[0] == weights else mul.input[0], "Cast")
    total = _sole(g, mul.output[0], "ReduceSum")
    if cast is None or cast.input[0] != own or attribute(cast, "to", 0) != 1 or total is None:
        return None
    axes = ints_attribute(total, "axes") if len(total.input) == 1 else g.constant(total.input[1])
    ok = axes is not None and [int(a) for a in np.ravel(axes)] == [-1] and attribute(total, "keepdims", 1) == 1
    return total if ok else None


@dataclass(frozen=True)
class _CacheScores:
    """The self-attention's scores: q against the cache and against this step's own k."""

    q: str
    k: str
    past_key: str
    positions: str
    heads: tuple[int, int]
    removed: tuple[Any, ...]


def _cache_scores(g: Graph, s: _Scores) -> _CacheScores | None:
    """Where(own, q . k, q . past_key) with the cache's masks, for the scores `s`; None otherwise."""
    pick = g.made_by(s.raw, "Where")
    own_mm, past_mm = (g.made_by(pick.input[i], "MatMul") for i in (1, 2)) if pick is not None else (None, None)
    if pick is None or own_mm is None or past_mm is None or own_mm.input[0] != past_mm.input[0]:
        return None
    past_key, masks = _transposed_input(g, past_mm.input[1]), _cache_masks(g, s.blocked, pick.input[0])
    heads = _heads(g, past_key) if past_key is not None else None
    if past_key is None or heads is None or masks is None or not _same_slots(g, past_key, masks.slot_axis_of):
        return None
    shape = [-1, heads[0], 1, heads[1]]
    own_t = g.made_by(own_mm.input[1], "Transpose")
    q = _reshaped(g, own_mm.input[0], shape)
    k = (
        _reshaped(g, own_t.input[0], shape)
        if own_t is not None and ints_attribute(own_t, "perm") == SWAP_LAST
        else None
    )
    if q is None or k is None:
        return None
    return _CacheScores(q, k, past_key, masks.positions, heads, (pick, own_mm, past_mm))


def _self(g: Graph, s: _Scores) -> _Match | None:
    """CacheAttention(q, k, v, past_key, past_value, positions, scale) for the attention whose scores
    `s` are, or None: the weights' own slot split off, the cache's values mixed, the own value added."""
    scores = _cache_scores(g, s)
    readers = _readers(g, s.softmax.output[0])
    if scores is None or readers is None or set(readers) != {"Mul", "Where", "Reshape"}:
        return None
    weights, own = s.softmax.output[0], scores.removed[0].input[0]
    keep, by_layer = readers["Where"], readers["Reshape"]
    zero, total = g.scalar(keep.input[1]), _own_weight(g, readers["Mul"], own, weights)
    if list(keep.input[::2]) != [own, weights] or zero is None or zero.item() != 0.0 or total is None:
        return None
    mix, scaled = _sole(g, keep.output[0], "MatMul"), _sole(g, total.output[0], "Mul")
    if mix is None or scaled is None or mix.input[1] not in g.inputs or _heads(g, mix.input[1]) != scores.heads:
        return None
    own_value = scaled.input[1] if scaled.input[0] == total.output[0] else scaled.input[0]
    v = _reshaped(g, own_value, [-1, scores.heads[0], 1, scores.heads[1]])
    add = _sole(g, mix.output[0], "Add")
    if v is None or add is None or sorted(add.input) != sorted([mix.output[0], scaled.output[0]]):
        return None
    rows = _outputs(g, by_layer, weights, add.output[0], scores.heads)
    if rows is None:
        return None
    inputs = [scores.q, scores.k, v, scores.past_key, mix.input[1], scores.positions, s.scale]
    node = onnx_module().helper.make_node(
        "CacheAttention", inputs, [rows.output[0], by_layer.output[0]], name=f"{rows.output[0]}/fused", domain=DOMAIN
    )
    mixing = (readers["Mul"], total, keep, mix, scaled, add, by_layer, rows)
    return _Match((s.softmax, s.where, s.div, *scores.removed, *mixing), node)


def _self_contained(g: Graph, match: _Match) -> bool:
    """Whether nothing outside the match reads what its removed nodes made (but what the fused node makes)."""
    removed, made = {id(n) for n in match.removed}, set(match.fused.output)
    hidden = [o for n in match.removed for o in n.output if o not in made]
    return not any(o in g.outputs for o in hidden) and all(
        id(r) in removed for o in hidden for r in g.consumers.get(o, [])
    )


def fuse_attention(model: Any) -> dict[str, int]:
    """Rewrite `model`'s attentions in place; the CacheAttention and CrossAttention nodes put in."""
    if next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0) < SOFTMAX_LAST_AXIS:
        return {}
    g = Graph(model.graph)
    matches = []
    for node in g.graph.node:
        s = _scores(g, node) if node.op_type == "Softmax" else None
        match = (_cross(g, s) or _self(g, s)) if s is not None else None
        if match is not None and _self_contained(g, match):
            matches.append(match)
    if not matches:
        return {}
    placed = {id(max(m.removed, key=lambda n: g.position[id(n)])): m.fused for m in matches}
    replaced(model, [n for m in matches for n in m.removed], placed)
    crosses = sum(m.fused.op_type == "CrossAttention" for m in matches)
    counts = {"CacheAttention": len(matches) - crosses, "CrossAttention": crosses}
    return {op: n for op, n in counts.items() if n}


def index_sources(model: Any) -> None:
    """Give every fused CrossAttention SOURCE_ROWS, when they are all that read their keys and values
    (graph inputs, nothing else reads, no graph output): those inputs' batch axis becomes SOURCES.
    Run it on a graph without dead nodes: the written attention's transposes of the keys read them."""
    crosses = [n for n in model.graph.node if n.domain == DOMAIN and n.op_type == "CrossAttention"]
    if not crosses:
        return
    shared = {name for node in crosses for name in node.input[1:3]}
    g = Graph(model.graph)
    if SOURCE_ROWS in g.inputs or any(name not in g.inputs or name in g.outputs for name in shared):
        return
    readers = [r for name in shared for r in g.consumers.get(name, [])]
    misread = [i for r in readers for i, name in enumerate(r.input) if name in shared and i not in (1, 2)]
    if misread or any(r.domain != DOMAIN or r.op_type != "CrossAttention" for r in readers):
        return
    onnx = onnx_module()
    batch = g.inputs[crosses[0].input[3]].type.tensor_type.shape.dim[0]  # the mask's rows, as the graph names them
    rows = onnx.helper.make_tensor_value_info(SOURCE_ROWS, INT64, [batch.dim_param or None])
    model.graph.input.append(rows)
    for name in shared:
        g.inputs[name].type.tensor_type.shape.dim[0].dim_param = SOURCES
    for node in crosses:
        node.input.append(SOURCE_ROWS)
