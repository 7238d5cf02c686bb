"""The lean spelling of the seven-bit per-row form (export/lean_quant.py): fused QuantizeLinear and
DequantizeLinear compute the very bits the elementwise chain did, and every reader of a quantized
graph still finds its MatMuls."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from export.invariant_quant import batch_invariant, find_quantized_matmuls, rewrite_matmuls, weight_only
from export.lean_quant import lean_row_quant, spelled_long
from tests.export.test_invariant_quant import LEVELS, run, two_layer_int8

RNG = np.random.default_rng(7)


def inputs(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Random rows, loud rows, and rows whose scaled values sit exactly on rounding ties."""
    x = RNG.standard_normal(shape).astype(np.float32)
    loud = x * 50
    ties = RNG.integers(-62, 62, shape).astype(np.float32) + 0.5  # k + 0.5: a tie for round()
    ties[..., 0] = 63.0  # the row's max: its scale is exactly 1, so x / s is the tie itself
    return [x, loud, ties, np.zeros(shape, np.float32)]


@pytest.mark.parametrize("rows", [["batch", "seq"], ["rows"]])
@pytest.mark.parametrize("level", [LEVELS.ORT_DISABLE_ALL, LEVELS.ORT_ENABLE_ALL])
def test_the_lean_form_computes_the_same_bits(
    tmp_path: Path, rows: list[str], level: ort.GraphOptimizationLevel
) -> None:
    long = batch_invariant(two_layer_int8(tmp_path, rows))
    lean = lean_row_quant(long)
    assert spelled_long(long) and not spelled_long(lean)
    ops = [n.op_type for n in lean.graph.node]
    assert "Round" not in ops and ops.count("QuantizeLinear") == 2  # one per quantized activation
    if rows == ["rows"]:  # (N, K): per-axis quantize, and the rescale fused as well
        assert ops.count("DequantizeLinear") == 2 and "Cast" not in ops and "Reshape" not in ops  # ranges 1-D
    shape = (3, 5, 32) if len(rows) == 2 else (7, 32)
    for x in inputs(shape):
        assert np.array_equal(run(lean, {"x": x}, level), run(long, {"x": x}, level))
    assert lean_row_quant(lean) == lean  # idempotent


@pytest.mark.parametrize("rows", [["batch", "seq"], ["rows"]])
def test_readers_find_the_same_matmuls_in_either_spelling(tmp_path: Path, rows: list[str]) -> None:
    long = batch_invariant(two_layer_int8(tmp_path, rows))
    lean = lean_row_quant(long)
    fields = [
        (m.activation, m.weight, m.weight_scale, m.weight_zero_point, m.output)
        for m in find_quantized_matmuls(long.graph)
    ]
    assert fields == [
        (m.activation, m.weight, m.weight_scale, m.weight_zero_point, m.output)
        for m in find_quantized_matmuls(lean.graph)
    ]
    x = inputs((3, 5, 32) if len(rows) == 2 else (7, 32))[0]
    fp32_long, fp32_lean = (rewrite_matmuls(m, weight_only) for m in (long, lean))
    assert not {"QuantizeLinear", "MatMulInteger"} & {n.op_type for n in fp32_lean.graph.node}  # nothing left over
    assert np.array_equal(
        run(fp32_lean, {"x": x}, LEVELS.ORT_ENABLE_ALL), run(fp32_long, {"x": x}, LEVELS.ORT_ENABLE_ALL)
    )


def test_a_graph_with_nothing_to_fuse_is_left_as_it_is(tmp_path: Path) -> None:
    fp32 = rewrite_matmuls(batch_invariant(two_layer_int8(tmp_path)), weight_only)
    lean = lean_row_quant(fp32)
    assert [n.op_type for n in lean.graph.node] == [n.op_type for n in fp32.graph.node]
    assert not spelled_long(fp32)
