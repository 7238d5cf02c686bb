"""A graph read without its weights (service/engine/graph_bytes.py): the same graph, its large
initializers external data in its own file, which onnxruntime reads to the same results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.engine.graph_bytes import GraphBytesError, structure

RNG = np.random.default_rng(3)


def matmuls(path: Path) -> onnx.ModelProto:
    """y = (x @ big + small) * listed: one weight in raw_data over the threshold, one under, and one
    written as float_data (not raw bytes)."""
    big = numpy_helper.from_array(RNG.standard_normal((64, 32)).astype(np.float32), "big")
    small = numpy_helper.from_array(RNG.standard_normal(32).astype(np.float32), "small")
    listed = helper.make_tensor("listed", TensorProto.FLOAT, [32], RNG.standard_normal(32).tolist())
    nodes = [
        helper.make_node("MatMul", ["x", "big"], ["h"]),
        helper.make_node("Add", ["h", "small"], ["a"]),
        helper.make_node("Mul", ["a", "listed"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], [big, small, listed],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return model


def session(model: bytes | str, folder: Path | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def test_large_weights_stay_in_the_file_and_load_the_same(tmp_path: Path) -> None:
    written = matmuls(tmp_path / "graph.onnx")
    read = structure(tmp_path / "graph.onnx", threshold=1024)
    model = onnx.load_from_string(read.model)
    where = {i.name: i.data_location for i in model.graph.initializer}
    assert where == {"big": TensorProto.EXTERNAL, "small": TensorProto.DEFAULT, "listed": TensorProto.DEFAULT}
    assert len(read.model) < 2048 < (tmp_path / "graph.onnx").stat().st_size
    assert read.external == frozenset()
    # everything but the moved bytes is as written
    assert [n.SerializeToString() for n in model.graph.node] == [n.SerializeToString() for n in written.graph.node]
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    got = session(read.model, tmp_path).run(None, {"x": x})[0]
    assert np.array_equal(got, session(str(tmp_path / "graph.onnx")).run(None, {"x": x})[0])


def test_weights_already_beside_the_graph_are_named(tmp_path: Path) -> None:
    model = matmuls(tmp_path / "graph.onnx")
    onnx.save(model, str(tmp_path / "apart.onnx"), save_as_external_data=True, location="apart.weights",
              size_threshold=1024)  # fmt: skip
    read = structure(tmp_path / "apart.onnx", threshold=1024)
    assert read.external == frozenset({"big"})
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    got = session(read.model, tmp_path).run(None, {"x": x})[0]
    assert np.array_equal(got, session(str(tmp_path / "graph.onnx")).run(None, {"x": x})[0])


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    matmuls(tmp_path / "graph.onnx")
    data = (tmp_path / "graph.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphBytesError):
        structure(tmp_path / "cut.onnx")
