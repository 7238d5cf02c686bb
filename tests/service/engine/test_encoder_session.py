"""An encoder's residual Add and the LayerNormalization after it run as the graph writes them.
onnxruntime's SkipLayerNormFusion joins them into one kernel, which took 396-555 us where the two
took about 80 in the shipped int8 encoders (docs/benchmarks.md, 2026-12-07, eighth); encoder
sessions load without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from service.engine.onnx_model import ENCODER_DISABLED_OPTIMIZERS, SessionConfig, make_session

RNG = np.random.default_rng(0)
H = 64


def residual_norm(path: Path) -> str:
    """LayerNormalization(x + y): an encoder's last residual and its final norm, (B, S, H)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "src_len", H])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "src_len", H])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "src_len", H])
    weights = [
        numpy_helper.from_array(RNG.standard_normal(H).astype(np.float32), "gamma"),
        numpy_helper.from_array(RNG.standard_normal(H).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "y"], ["sum"]),
        helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["out"], axis=-1, epsilon=1e-5),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x, y], [out], weights), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 9
    onnx.save(model, str(path))
    return str(path)


def as_written(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def test_encoder_sessions_keep_the_residual_add_and_its_norm_apart(tmp_path: Path) -> None:
    path = residual_norm(tmp_path / "residual_norm.onnx")
    config = SessionConfig(intra_op_threads=1, spinning=False)
    encoder = make_session(path, config, disabled_optimizers=ENCODER_DISABLED_OPTIMIZERS)
    written = as_written(path)
    feeds = {name: (RNG.standard_normal((16, 20, H)) * 4).astype(np.float32) for name in ("x", "y")}
    expected = written.run(None, feeds)[0]
    # bit for bit: fused, the kernel sums in another order (on the Intel Xeon of that section the
    # same inputs differed in the last bits with the fusion on)
    assert np.array_equal(encoder.run(None, feeds)[0], expected)
