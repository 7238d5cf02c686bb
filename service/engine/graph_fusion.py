"""A bundle's graphs rewritten as they load, onto the package's own onnxruntime operators
(service/engine/_ortops.c, domain attention_mt):

- an int8 graph's per-row quantizations and rescales (quant_fusion.py): RowQuant and RowDequant,
  the same values bit for bit;
- a decoder step's attentions (attention_fusion.py): CacheAttention and CrossAttention, the graph's
  values to rounding, and batch-invariant as the graph is.

The bundle on disk is not changed: a process without the library or without the onnx package loads
the graph as written, slower.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from service.engine import attention_fusion, graph_bytes, quant_fusion
from service.engine.graph_view import DOMAIN, onnx_module, prune, without_dead_nodes

__all__ = ["DOMAIN", "FusedGraph", "Fusions", "fused_graph", "library"]
_LIBRARY = "service.engine._ortops"


def library() -> str | None:
    """The path of the built operator library, or None: not built (no C compiler at install), or
    no onnx package to rewrite graphs with."""
    if importlib.util.find_spec("onnx") is None:
        return None
    spec = importlib.util.find_spec(_LIBRARY)
    return spec.origin if spec is not None and spec.origin else None


@dataclass(frozen=True)
class Fusions:
    """Which rewrites a graph gets."""

    rows: bool = True  # an int8 graph's row quantizations (bit for bit)
    attention: bool = True  # a decoder step's attentions (to rounding)
    sources: bool = True  # their cross-attentions read each sentence's keys once (attention_fusion.SOURCE_ROWS)


@dataclass(frozen=True)
class FusedGraph:
    model: bytes  # the rewritten ModelProto, serialized, for onnxruntime to load from memory
    operators: dict[str, int]  # attention_mt operator -> nodes of it in the graph


def fused_graph(path: Path, given: frozenset[str] = frozenset(), fusions: Fusions = Fusions()) -> FusedGraph | None:
    """The graph at `path` with what `fusions` asks fused, or None when it has nothing to fuse. Its large
    weights are external data in `path` (graph_bytes.py): the session loads it with its folder.
    `given`: the initializers the session is given (shared weights), which may live outside the graph."""
    onnx = onnx_module()
    read = graph_bytes.structure(path)  # the weights stay in the file, where onnxruntime reads them
    if read.external - given:
        return None  # weights beside the graph that the session is not given: it would not find them
    model = onnx.load_from_string(read.model)
    del read
    operators: Counter[str] = Counter()
    if fusions.rows:
        operators.update(quant_fusion.fuse_rows(model))
    if fusions.attention:
        operators.update(attention_fusion.fuse_attention(model))
    if not operators:
        return None
    without_dead_nodes(model)
    if fusions.attention and fusions.sources:
        attention_fusion.index_sources(model)
    prune(model)
    model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return FusedGraph(model.SerializeToString(), dict(sorted(operators.items())))
