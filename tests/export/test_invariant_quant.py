"""Batch-invariant graphs (issue 16): per-row int8 activations and one-row MatMuls over the padded
source compute what they should, and a freshly exported model decodes a sentence the same alone and batched."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from export.bundle_writer import write_manifest
from export.invariant_quant import (
    FIRST_PER_ROW,
    PAD_ROWS,
    batch_invariant,
    copy_model,
    first_per_row,
    pad_constants,
    padding_invariant,
    replace_nodes,
    second_rows,
    seven_bit_per_row,
)
from export.lean_quant import lean_row_quant, spelled_long
from export.pipeline import ExportOptions, export_run
from export.quantize import OP_TYPES, batching_changes
from export.requantize import requantize_bundle
from service.engine.bundle import load_bundle
from service.engine.onnx_model import SOURCE_CHUNK, rounded_up
from service.engine.tokenizer import Tokenizer
from service.engine.translator import Translator
from tests.export.test_export_families import make_run
from tests.support.synthetic import synthetic_pairs

RNG = np.random.default_rng(0)
LEVELS = ort.GraphOptimizationLevel


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], level: ort.GraphOptimizationLevel) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def two_layer_int8(tmp_path: Path, rows: list[str] | None = None) -> onnx.ModelProto:
    """x (B, S, 32) (or (*rows, 32)) -> Linear with bias -> ReLU -> Linear, through onnxruntime's
    quantize_dynamic."""
    w1, b1, w2 = RNG.standard_normal((32, 16)), RNG.standard_normal(16) * 3, RNG.standard_normal((16, 8))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    weights = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [*(rows or ["batch", "seq"]), 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], weights), opset_imports=[helper.make_opsetid("", 20)]
    )
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "fp32.onnx"))
    quantize_dynamic(str(tmp_path / "fp32.onnx"), str(tmp_path / "int8.onnx"), weight_type=QuantType.QInt8)
    return onnx.load(str(tmp_path / "int8.onnx"))


def dequantized(model: onnx.ModelProto, name: str) -> np.ndarray:
    """A weight as `import-bundle` reads it back: (q - zero_point) * scale."""
    inits = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    return (inits[f"{name}_quantized"] - inits[f"{name}_zero_point"]) * inits[f"{name}_scale"]


def per_row_reference(x: np.ndarray, levels: int) -> np.ndarray:
    scale = np.abs(x).max(axis=-1, keepdims=True) / levels
    return np.round(x / scale) * scale


@pytest.mark.parametrize("level", [LEVELS.ORT_DISABLE_ALL, LEVELS.ORT_ENABLE_ALL])
def test_per_row_int8_computes_each_row_with_its_own_scale(tmp_path: Path, level: ort.GraphOptimizationLevel) -> None:
    dynamic = two_layer_int8(tmp_path)
    rewritten = batch_invariant(dynamic)
    assert not [n for n in rewritten.graph.node if n.op_type == "DynamicQuantizeLinear"]
    for name in ("w1", "w2"):  # the same weights, where import-bundle looks for them
        assert np.array_equal(dequantized(rewritten, name), dequantized(dynamic, name))
    x = RNG.standard_normal((3, 5, 32)).astype(np.float32)
    x[1, 2] *= 40  # one loud row: per-tensor scales would coarsen every other row
    h = per_row_reference(x.astype(np.float64), 63) @ dequantized(dynamic, "w1") + numpy_helper.to_array(
        next(i for i in dynamic.graph.initializer if i.name == "b1")
    )
    want = per_row_reference(np.maximum(h, 0), 127) @ dequantized(dynamic, "w2")  # ReLU rows take 0..127
    got = run(rewritten, {"x": x}, level)
    # With all optimizations too: onnxruntime's MatMulIntegerToFloat fusion is wrong for a per-row
    # scale with a bias, and the rewrite must not let it happen.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert np.array_equal(run(rewritten, {"x": x[1:2]}, level), got[1:2])  # a row alone: the same bits


def as_first_shipped(model: onnx.ModelProto) -> onnx.ModelProto:
    """A per_row graph as the bundles first shipped it: 8-bit activations (levels 127, ReLU 255,
    shifted by 128), uint8 weights with zero point 128 (the same values)."""
    old = onnx.ModelProto()
    old.CopyFrom(model)
    back = {new: first for first, new in FIRST_PER_ROW.items()}
    for node in old.graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = back.get(name, name)
    weights = {n.input[1]: n.input[3] for n in old.graph.node if n.op_type == "MatMulInteger"}
    values = {"/row_quant/127": np.float32(127), "/row_quant/255": np.float32(255), "/row_quant/128": np.float32(128)}
    inits = {i.name: i for i in old.graph.initializer}
    for name, value in [*values.items(), ("/row_quant/u8_128", np.uint8(128))]:
        if name in inits:
            inits[name].CopyFrom(numpy_helper.from_array(np.array(value), name))
        else:
            old.graph.initializer.append(numpy_helper.from_array(np.array(value), name))
    for weight, zero_point in weights.items():
        w = numpy_helper.to_array(inits[weight]).astype(np.int16) + 128
        inits[weight].CopyFrom(numpy_helper.from_array(w.astype(np.uint8), weight))
        inits[zero_point].CopyFrom(numpy_helper.from_array(np.array(128, np.uint8), zero_point))
    return old


def test_the_first_per_row_graphs_become_seven_bit_with_the_same_weights(tmp_path: Path) -> None:
    dynamic = two_layer_int8(tmp_path)
    today = batch_invariant(dynamic)
    first = as_first_shipped(today)
    assert first_per_row(first) and not first_per_row(today)
    x = RNG.standard_normal((3, 5, 32)).astype(np.float32)
    b1 = numpy_helper.to_array(next(i for i in dynamic.graph.initializer if i.name == "b1"))
    h = per_row_reference(x.astype(np.float64), 127) @ dequantized(dynamic, "w1") + b1
    want = per_row_reference(np.maximum(h, 0), 255) @ dequantized(dynamic, "w2")  # 8 bits: what it computed
    np.testing.assert_allclose(run(first, {"x": x}, LEVELS.ORT_ENABLE_ALL), want, atol=1e-4 * np.abs(want).max())
    upgraded = seven_bit_per_row(first)
    for name in ("w1", "w2"):  # the same weights, stored signed
        assert np.array_equal(dequantized(upgraded, name), dequantized(dynamic, name))
        assert (
            next(i for i in upgraded.graph.initializer if i.name == f"{name}_quantized").data_type == TensorProto.INT8
        )
    assert not first_per_row(upgraded) and batch_invariant(first) is not first
    assert sorted(n.op_type for n in upgraded.graph.node) == sorted(n.op_type for n in today.graph.node)
    assert np.array_equal(run(upgraded, {"x": x}, LEVELS.ORT_ENABLE_ALL), run(today, {"x": x}, LEVELS.ORT_ENABLE_ALL))


def test_row_quantized_activations_stay_under_128_so_avx2_cannot_saturate(tmp_path: Path) -> None:
    """u8 x s8 on AVX2 adds pairs of products in saturating 16 bits: exact only while q < 128."""
    model = batch_invariant(two_layer_int8(tmp_path))
    q_names = [n.input[0] for n in model.graph.node if n.op_type == "MatMulInteger"]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_tensor_value_info(q, TensorProto.UINT8, None) for q in q_names)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((4, 6, 32)).astype(np.float32) * 50
    for q in session.run(q_names, {"x": x}):
        assert q.max() <= 127 and q.max() >= 120  # the loudest value of a row takes the top level


def invariant_int8(model: onnx.ModelProto) -> onnx.ModelProto:
    return lean_row_quant(batch_invariant(model))


def one_row_matmul() -> onnx.ModelProto:
    """weights (B, 4, 1, src_len) @ values (B, 4, src_len, 16): a decoder step's attention over the source."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 4, 1, "src_len"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 4, "src_len", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


def with_second_rows(model: onnx.ModelProto, outputs: set[str]) -> onnx.ModelProto:
    """`model` as exports wrote it before: each MatMul making `outputs` given a copy of its first row."""
    model = copy_model(model)
    p, nodes = PAD_ROWS, []
    for n in model.graph.node:
        if n.op_type != "MatMul" or n.output[0] not in outputs:
            nodes.append(n)
            continue
        a, b, y = n.input[0], n.input[1], n.output[0]
        nodes += [
            helper.make_node("Slice", [a, f"{p}/0", f"{p}/1", f"{p}/-2"], [f"{y}{p}/first"]),
            helper.make_node("Concat", [a, f"{y}{p}/first"], [f"{y}{p}/a"], axis=-2),
            helper.make_node("MatMul", [f"{y}{p}/a", b], [f"{y}{p}/y"]),
            helper.make_node("Slice", [f"{y}{p}/y", f"{p}/0", f"{p}/-1", f"{p}/-2"], [y]),
        ]
    replace_nodes(model.graph, nodes)
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in pad_constants().items())
    return model


def zero_padded(weights: np.ndarray, values: np.ndarray, width: int) -> dict[str, np.ndarray]:
    """The feeds of `one_row_matmul` with the source axis padded with zeros to `width`."""
    extra = width - weights.shape[-1]
    return {
        "a": np.pad(weights, [(0, 0)] * 3 + [(0, extra)]),
        "b": np.pad(values, [(0, 0), (0, 0), (0, extra), (0, 0)]),
    }


def test_one_row_matmuls_over_the_padded_axis_are_exact_at_the_widths_the_service_gives() -> None:
    """The service pads every source to a multiple of SOURCE_CHUNK: then a row alone and the same row
    among wider ones are summed alike, bit for bit, so the graph keeps its one row."""
    padded = padding_invariant(one_row_matmul())
    assert [n.op_type for n in padded.graph.node] == ["MatMul"]
    for length in range(1, 41):
        weights = RNG.random((2, 4, 1, length), dtype=np.float32)
        values = RNG.standard_normal((2, 4, length, 16)).astype(np.float32)
        chunk = rounded_up(length, SOURCE_CHUNK)
        alone = run(padded, zero_padded(weights, values, chunk), LEVELS.ORT_ENABLE_ALL)
        np.testing.assert_allclose(alone, weights @ values, rtol=1e-5, atol=1e-5)
        for width in range(chunk + SOURCE_CHUNK, 65, SOURCE_CHUNK):
            batched = run(padded, zero_padded(weights, values, width), LEVELS.ORT_ENABLE_ALL)
            assert np.array_equal(batched, alone), (length, width)


def test_an_earlier_exports_second_rows_are_taken_away() -> None:
    plain = one_row_matmul()
    old = with_second_rows(plain, {"y"})
    assert second_rows(old) and [n.op_type for n in old.graph.node] == ["Slice", "Concat", "MatMul", "Slice"]
    again = padding_invariant(old)
    assert not second_rows(again) and [n.op_type for n in again.graph.node] == ["MatMul"]
    assert not {i.name for i in again.graph.initializer} & set(pad_constants())  # nothing reads them now
    assert padding_invariant(again) == again  # idempotent
    feeds = {
        "a": RNG.random((3, 4, 1, 24), dtype=np.float32),
        "b": RNG.standard_normal((3, 4, 24, 16)).astype(np.float32),
    }
    assert np.array_equal(run(again, feeds, LEVELS.ORT_ENABLE_ALL), run(plain, feeds, LEVELS.ORT_ENABLE_ALL))


def mixed_lengths() -> list[str]:
    """24 texts of one to five synthetic sentences each: 6 to 35 tokens, in one batch."""
    sentences = [en for en, _ in synthetic_pairs()[::7]]
    return [" ".join(sentences[i : i + 1 + i % 5]) for i in range(24)]


def assert_batch_invariant(translator: Translator) -> None:
    src_ids = translator.source_ids(mixed_lengths())
    assert len({len(ids) for ids in src_ids}) > 10
    for beam in (1, 4):
        changes = batching_changes(translator, src_ids, beam, batch_size=len(src_ids), max_output_tokens=12)
        assert changes.invariant, (beam, changes)


@pytest.mark.parametrize("case", ["transformer", "rnn-additive"])
def test_a_fresh_int8_export_is_batch_invariant(
    case: str, tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run_dir = make_run(tmp_path / "run", case, synthetic_corpus, en_tokenizer, zh_tokenizer)
    bundle = export_run(run_dir, tmp_path / "b", ExportOptions(quantize="int8", quality_split=None, alignment=False))
    q = bundle.manifest.quantization
    assert q.mode == "int8" and q.method and "per row" in q.method and q.batch_invariant is True
    for graph in (bundle.manifest.graphs.encoder.file, bundle.manifest.graphs.decoder.file):
        ops = {n.op_type for n in onnx.load(str(bundle.file(graph))).graph.node}
        assert "DynamicQuantizeLinear" not in ops and "Round" not in ops and "QuantizeLinear" in ops  # lean
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(bundle.file("decoder.onnx"))).graph.node}
    assert_batch_invariant(Translator(bundle))


def test_an_fp32_export_is_checked_too(
    tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run_dir = make_run(tmp_path / "run", "transformer", synthetic_corpus, en_tokenizer, zh_tokenizer)
    bundle = export_run(run_dir, tmp_path / "b", ExportOptions(quality_split=None, alignment=False))
    assert bundle.manifest.quantization.mode == "none" and bundle.manifest.quantization.batch_invariant is True
    assert_batch_invariant(Translator(bundle))


@pytest.mark.parametrize("form", ["per-tensor", "first per-row", "seven-bit, not lean", "second rows"])
def test_requantize_rewrites_an_older_int8_bundle_in_place(
    form: str, tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run_dir = make_run(tmp_path / "run", "transformer", synthetic_corpus, en_tokenizer, zh_tokenizer)
    fp32 = export_run(run_dir, tmp_path / "fp32", ExportOptions(quality_split=None, alignment=False))
    old = tmp_path / "old"  # int8 as bundles were quantized before: per-tensor dynamic, or 8-bit rows
    shutil.copytree(fp32.path, old)
    for graph in ("encoder.onnx", "decoder.onnx"):
        quantize_dynamic(
            str(fp32.file(graph)), str(old / graph), weight_type=QuantType.QInt8, op_types_to_quantize=OP_TYPES
        )
        if form == "first per-row":
            onnx.save(as_first_shipped(batch_invariant(onnx.load(str(old / graph)))), str(old / graph))
        elif form == "seven-bit, not lean":
            onnx.save(batch_invariant(onnx.load(str(old / graph))), str(old / graph))
        elif form == "second rows":  # today's form, as exported before the service chunked its widths
            model = invariant_int8(onnx.load(str(old / graph)))
            attention = {n.output[0] for n in model.graph.node if n.output[0].endswith("mixed")}
            assert graph == "encoder.onnx" or attention
            onnx.save(with_second_rows(model, attention), str(old / graph))
    fields = fp32.manifest.model_dump(exclude={"files"})
    fields["quantization"] = {"mode": "int8", "method": "dynamic", "bleu_fp32": 12.5, "size_fp32": 1000}
    write_manifest(old, fields)

    bundle = requantize_bundle(old, corpus=synthetic_corpus, rounds=1)
    q = load_bundle(old).manifest.quantization  # checksums rewritten: it loads
    assert bundle.path == old and q.batch_invariant is True and q.method and "per row" in q.method
    assert q.bleu_fp32 == 12.5 and q.size_fp32 == 1000 and q.token_agreement is None
    assert q.bleu_int8 is not None and q.bleu_delta == round(q.bleu_int8 - 12.5, 2)
    assert q.speedup is not None and q.speedup > 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    for graph in ("encoder.onnx", "decoder.onnx"):
        model = onnx.load(str(bundle.file(graph)))
        assert not first_per_row(model) and "DynamicQuantizeLinear" not in {n.op_type for n in model.graph.node}
        assert not spelled_long(model) and "QuantizeLinear" in {n.op_type for n in model.graph.node}
        assert not second_rows(model)
    assert_batch_invariant(Translator(bundle))
