"""The int8 graphs' row quantizations fused into attention_mt.RowQuant / RowDequant
(service/engine/quant_fusion.py, _ortops.c): the same bits as the graph as written, on both
spellings, both code paths of the operators and whole translations; chains others read are left
alone; and a process that cannot fuse loads the graph as written."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx.shape_inference
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmarks.step_bench import feeds
from export.invariant_quant import batch_invariant
from export.lean_quant import lean_row_quant
from service.engine import graph_fusion
from service.engine.bundle import load_bundle
from service.engine.graph_fusion import Fusions
from service.engine.onnx_model import OnnxSeq2Seq, SessionConfig
from service.engine.scoring import Scoring
from service.engine.search import beam_search, greedy_search
from service.engine.translator import pad_ids
from tests.export.test_invariant_quant import two_layer_int8
from tests.export.test_lean_quant import inputs

RNG = np.random.default_rng(11)
ROWS_ONLY = Fusions(rows=True, attention=False)  # the attentions' fusion rounds differently


@pytest.fixture(autouse=True)
def built() -> None:
    if graph_fusion.library() is None:
        pytest.fail("the operator library is not built: pip install -e . needs a C compiler (see pyproject.toml)")


@pytest.fixture(params=["avx2", "portable"])
def code_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each session registers the operators with the loops this chooses (the AVX2 ones where the CPU
    has them)."""
    monkeypatch.setenv("ATTENTION_MT_PORTABLE_OPS", "1" if request.param == "portable" else "0")
    yield request.param


def session(model: bytes, fused: bool, folder: Path | None = None) -> ort.InferenceSession:
    """`folder`: where a fused graph's weights are (the file it was read from)."""
    options = ort.SessionOptions()
    if fused:
        options.register_custom_ops_library(graph_fusion.library())
    if folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def fuse(model: onnx.ModelProto, tmp_path: Path) -> graph_fusion.FusedGraph:
    onnx.save(model, str(tmp_path / "graph.onnx"))
    fused = graph_fusion.fused_graph(tmp_path / "graph.onnx", fusions=ROWS_ONLY)
    assert fused is not None
    return fused


def ops(model: bytes) -> list[str]:
    return [n.op_type for n in onnx.load_from_string(model).graph.node]


@pytest.mark.parametrize("shapes", [False, True])
@pytest.mark.parametrize("rows", [["batch", "seq"], ["rows"]])
def test_fused_chains_compute_the_same_bits(tmp_path: Path, rows: list[str], shapes: bool, code_path: str) -> None:
    """Both spellings of the lean form: (N, K) rows quantized on axis 0, and (B, S, K) through Div;
    a ReLU's output (no Abs) and a linear one; random, loud, tied and all-zero rows. `shapes`: the
    graph records its values' shapes (value_info), which the replaced values' must not keep."""
    lean = lean_row_quant(batch_invariant(two_layer_int8(tmp_path, rows)))
    if shapes:
        lean = onnx.shape_inference.infer_shapes(lean)
        assert lean.graph.value_info
    fused = fuse(lean, tmp_path)
    assert fused.operators == {"RowDequant": 2, "RowQuant": 2}
    kinds = ops(fused.model)
    assert kinds.count("MatMulInteger") == 2 and kinds.count("RowQuant") == 2 and kinds.count("RowDequant") == 2
    assert not {"QuantizeLinear", "DequantizeLinear", "ReduceMax", "Abs", "Cast"} & set(kinds)
    written, ours = session(lean.SerializeToString(), False), session(fused.model, True)
    for x in inputs((3, 5, 32) if len(rows) == 2 else (7, 32)):
        assert np.array_equal(ours.run(None, {"x": x})[0], written.run(None, {"x": x})[0])


def lean_chain(k: int, n: int, with_bias: bool) -> onnx.ModelProto:
    """One (N, K) row quantization and rescale as export/lean_quant.py spells them, K and N not
    multiples of 8 (the operators' tails)."""
    weight = RNG.integers(-127, 128, (k, n)).astype(np.int8)
    consts = {
        "w": weight, "w_zp": np.array(0, np.int8), "w_scale": np.array(0.0123, np.float32),
        "levels": np.array(63, np.float32), "tiny": np.array(1e-30, np.float32), "zp": np.array(64, np.uint8),
        "axis": np.array([-1], np.int64), "bias": RNG.standard_normal(n).astype(np.float32),
    }  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Abs", ["x"], ["abs"]),
        node("ReduceMax", ["abs", "axis"], ["max"], keepdims=0),
        node("Max", ["max", "tiny"], ["range"]),
        node("Div", ["range", "levels"], ["scale"]),
        node("Shape", ["scale"], ["rows"]),
        node("Expand", ["zp", "rows"], ["zps"]),
        node("QuantizeLinear", ["x", "scale", "zps"], ["q"], axis=0),
        node("MatMulInteger", ["q", "w", "zp", "w_zp"], ["acc"]),
        node("Div", ["levels", "w_scale"], ["divisor"]),
        node("Div", ["range", "divisor"], ["out_scale"]),
        node("DequantizeLinear", ["acc", "out_scale"], ["mm"], axis=0),
    ]
    if with_bias:
        nodes.append(node("Add", ["mm", "bias"], ["y"]))
    else:
        nodes.append(node("Identity", ["mm"], ["y"]))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, name) for name, v in consts.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(("k", "n", "with_bias"), [(13, 5, True), (40, 17, False), (7, 3, True)])
def test_a_chain_of_any_width_gives_the_same_bits(
    tmp_path: Path, k: int, n: int, with_bias: bool, code_path: str
) -> None:
    model = lean_chain(k, n, with_bias)
    fused = fuse(model, tmp_path)
    assert fused.operators == {"RowDequant": 1, "RowQuant": 1}
    written, ours = session(model.SerializeToString(), False), session(fused.model, True)
    for x in [*inputs((9, k)), np.zeros((0, k), np.float32), RNG.standard_normal((1, k)).astype(np.float32) * 1e-35]:
        assert np.array_equal(ours.run(None, {"x": x})[0], written.run(None, {"x": x})[0])


def test_rows_split_over_threads_give_the_same_bits(
    tmp_path: Path, code_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wide enough (150 rows of 1,027 to quantize, of 4,099 to rescale), the operators hand runs of
    rows to the session's intra-op threads: the bits are the graph's as written and those of the
    operators in one thread (ATTENTION_MT_SERIAL_OPS, read as each session registers the library)."""
    model = lean_chain(1027, 4099, with_bias=True)
    fused = fuse(model, tmp_path)
    written = session(model.SerializeToString(), False)
    for x in inputs((150, 1027)):
        want = written.run(None, {"x": x})[0]
        for serial in ("1", "0"):
            monkeypatch.setenv("ATTENTION_MT_SERIAL_OPS", serial)
            assert np.array_equal(threaded(fused.model, tmp_path).run(None, {"x": x})[0], want), serial


def threaded(model: bytes, folder: Path) -> ort.InferenceSession:
    """A fused graph read from `folder`, on two intra-op threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.register_custom_ops_library(graph_fusion.library())
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def test_a_chain_something_else_reads_stays_as_written(tmp_path: Path) -> None:
    """A graph output that is a chain's range: that quantization is not fused (its rescale still is),
    and the graph gives the same bits and the same range."""
    model = lean_chain(16, 8, True)
    model.graph.output.append(helper.make_tensor_value_info("range", TensorProto.FLOAT, None))
    fused = fuse(model, tmp_path)
    assert fused.operators == {"RowDequant": 1}
    assert "QuantizeLinear" in ops(fused.model)
    written, ours = session(model.SerializeToString(), False), session(fused.model, True)
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    for got, want in zip(ours.run(None, {"x": x}), written.run(None, {"x": x}), strict=True):
        assert np.array_equal(got, want)


def test_a_graph_without_chains_is_not_rewritten(tmp_path: Path) -> None:
    x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in ("x", "y"))
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "plain", [x], [y]))
    onnx.save(model, str(tmp_path / "plain.onnx"))
    assert graph_fusion.fused_graph(tmp_path / "plain.onnx") is None


def test_the_operators_refuse_inputs_they_do_not_take() -> None:
    """A range that is not one value per row: an onnxruntime error naming the operator, not a crash."""
    node = helper.make_node("RowDequant", ["acc", "range", "divisor"], ["y"], domain=graph_fusion.DOMAIN)
    graph = helper.make_graph(
        [node], "bad",
        [helper.make_tensor_value_info("acc", TensorProto.INT32, [3, 4]),
         helper.make_tensor_value_info("range", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("divisor", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(graph_fusion.DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    feeds = {"acc": np.ones((3, 4), np.int32), "range": np.ones(2, np.float32), "divisor": np.array(2.0, np.float32)}
    with pytest.raises(Exception, match=r"attention_mt\.RowDequant: acc of rank 1 or more, a range per row"):
        session(model.SerializeToString(), True).run(None, feeds)


def encoder_feeds(batch: int) -> dict[str, np.ndarray]:
    ids = RNG.integers(4, 30, (batch, 9))  # the test bundle's vocabulary is small
    mask = np.zeros((batch, 9), bool)
    mask[0, 6:] = True
    return {"src_ids": ids, "src_pad_mask": mask}


def decoded(model: OnnxSeq2Seq) -> list[tuple[list[int], list[float], bytes, float]]:
    special = model.bundle.manifest.special_ids
    sources = [[5, 9, 14, 22, 7, special.eos], [11, 4, special.eos], [30, 31, 32, 33, 34, 35, 36, 37, special.eos]]
    ids, mask = pad_ids(sources)
    lengths = np.array([20, 20, 20])
    found = []
    for beam in (1, 4):
        state = model.encode(ids, mask)
        if beam == 1:
            nbest = [[h] for h in greedy_search(model, state, lengths, special.bos, special.eos, Scoring())]
        else:
            nbest = beam_search(model, state, lengths, special.bos, special.eos, beam, 2, Scoring(alpha=0.6))
        found += [(list(h.tokens), list(h.token_log_probs), np.asarray(h.attention).tobytes(), h.score)
                  for hyps in nbest for h in hyps]  # fmt: skip
    return found


def test_translations_are_the_same_fused_or_as_written(bundle_dir: Path) -> None:
    bundle = load_bundle(bundle_dir / "en-zh-int8")
    fused = OnnxSeq2Seq(bundle, SessionConfig(intra_op_threads=1, fuse_attention=False))
    written = OnnxSeq2Seq(bundle, SessionConfig(intra_op_threads=1, fuse_quantization=False, fuse_attention=False))
    assert set(fused.fused) == {"encoder", "decoder"} and written.fused == {}
    assert decoded(fused) == decoded(written)
    # onnxruntime's Python class would keep a graph loaded from bytes alive with the session
    assert all(getattr(s, "_model_bytes", None) is None for s in (fused.encoder, fused.decoder))


@pytest.mark.parametrize("graph", ["encoder", "decoder"])
def test_a_graph_without_recorded_shapes_gives_the_same_bits(bundle_dir: Path, tmp_path: Path, graph: str) -> None:
    """onnxruntime infers no shapes through our operators: a graph that records none (value_info)
    still computes what it computes as written."""
    model = onnx.load(str(bundle_dir / "en-zh-int8" / f"{graph}.onnx"))
    del model.graph.value_info[:]
    fused = fuse(model, tmp_path)
    written, ours = session(model.SerializeToString(), False), session(fused.model, True, tmp_path)
    for batch in (1, 5):
        inputs = feeds(written, batch) if graph == "decoder" else encoder_feeds(batch)
        for got, want in zip(ours.run(None, inputs), written.run(None, inputs), strict=True):
            assert np.array_equal(got, want)


def test_an_fp32_bundle_has_no_rows_to_fuse(bundle_dir: Path) -> None:
    config = SessionConfig(intra_op_threads=1, fuse_attention=False)
    assert OnnxSeq2Seq(load_bundle(bundle_dir / "en-zh"), config).fused == {}


def test_a_fused_graph_onnxruntime_refuses_loads_as_written(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator library onnxruntime cannot load (here: not a library at all) costs the speed, not
    the model: a warning names the graph, and it translates as before."""
    bundle = load_bundle(bundle_dir / "en-zh-int8")
    monkeypatch.setattr(graph_fusion, "library", lambda: str(bundle.path / "manifest.json"))
    with caplog.at_level(logging.WARNING, logger="attention_mt.engine"):
        model = OnnxSeq2Seq(bundle, SessionConfig(intra_op_threads=1))
    assert model.fused == {}
    assert any("loads unfused" in r.getMessage() and "decoder.onnx" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    written = OnnxSeq2Seq(bundle, SessionConfig(intra_op_threads=1, fuse_quantization=False, fuse_attention=False))
    assert decoded(model) == decoded(written)
