"""A loaded ONNX graph seen as producers and readers, for the rewrites that fuse nodes as a graph loads
(quant_fusion.py, attention_fusion.py). Constants are read into arrays only when a matcher asks: the
weights stay where they are."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

DOMAIN = "attention_mt"  # the package's onnxruntime operators (service/engine/_ortops.c)


def onnx_module() -> Any:
    """The onnx package, imported when a graph is fused: it costs a process ~0.6 s and 17 MB, which a
    server that fuses nothing does not pay."""
    import onnx  # noqa: PLC0415
    import onnx.numpy_helper  # noqa: PLC0415

    return onnx


class Graph:
    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[Any]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.tensors: dict[str, Any] = {i.name: i for i in graph.initializer}
        for n in graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.tensors[n.output[0]] = n.attribute[0].t
        self._read: dict[str, npt.NDArray[Any]] = {}
        self.outputs = {o.name for o in graph.output}
        self.inputs = {i.name: i for i in graph.input}
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
        if tensor is None or tensor.data_location == onnx_module().TensorProto.EXTERNAL:
            return None
        if name not in self._read:
            self._read[name] = onnx_module().numpy_helper.to_array(tensor)
        return self._read[name]

    def is_vector(self, name: str, dtype: int) -> bool:
        """A constant of rank 1 and this element type (TensorProto's), judged without reading it."""
        tensor = self.tensors.get(name)
        return tensor is not None and len(tensor.dims) == 1 and tensor.data_type == dtype

    def only_consumer(self, name: str) -> Any | None:
        readers = self.consumers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.outputs else None


def attribute(node: Any, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def ints_attribute(node: Any, name: str) -> list[int] | None:
    for a in node.attribute:
        if a.name == name:
            return [int(i) for i in a.ints]
    return None


def replaced(model: Any, removed: list[Any], placed: dict[int, Any]) -> None:
    """The graph's nodes without `removed`, each of `placed` (id of a removed node -> the node that
    replaces it) where that node was: its inputs are made before it, and its readers come after."""
    gone = {id(n) for n in removed}
    nodes = [placed.get(id(n), n) for n in model.graph.node if id(n) not in gone or id(n) in placed]
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def without_dead_nodes(model: Any) -> None:
    """Drop the nodes whose outputs nothing reads any more (a rewrite's leftovers: a reshape or a mask
    only the removed nodes read), until none is left. Standard operators have no side effects."""
    graph = model.graph
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        kept = [n for n in graph.node if any(o in read for o in n.output if o)]
        if len(kept) == len(graph.node):
            return
        del graph.node[:]
        graph.node.extend(kept)


def prune(model: Any) -> None:
    """Drop the initializers and Constant nodes no node reads any more (onnxruntime warns of each
    unused initializer at every load), and the recorded shapes (value_info) of values no node makes."""
    graph = model.graph
    used = {i for n in graph.node for i in n.input}
    keep = used | {o.name for o in graph.output}
    inputs = {i.name for i in graph.input}
    initializers = [i for i in graph.initializer if i.name in keep or i.name in inputs]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    nodes = [n for n in graph.node if n.op_type != "Constant" or n.output[0] in keep]
    del graph.node[:]
    graph.node.extend(nodes)
    made = {o for n in graph.node for o in n.output}
    info = [v for v in graph.value_info if v.name in made]
    del graph.value_info[:]
    graph.value_info.extend(info)
