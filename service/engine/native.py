"""The C kernels of service/engine/_native.c, where the install built them.

The extension is optional (pyproject.toml): an install without a C compiler serves with numpy
instead, with the same results: the beam's columns and candidates (service/engine/beam.py's
`top_per_row` and `BeamDecode._candidates`), the cache slots and the reorder's rows
(onnx_model.py's `OnnxSeq2Seq._write_slots` and `OnnxSeq2Seq._moved`), greedy's choice (greedy.py's
`GreedyDecode.advance`). Each function here says when the
kernel did not apply; the service's "ready" log line says whether it is built.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from service.engine.scoring import FloatArray, IntArray

_native: ModuleType | None
try:
    from service.engine import _native  # type: ignore[attr-defined, no-redef]
except ImportError:  # built without a C compiler: numpy does the work
    _native = None


@dataclass
class _Switch:
    declining: bool = False  # numpy_only() in force


_switch = _Switch()


def _kernels() -> ModuleType | None:
    """The extension, unless it is not built or numpy_only() is in force."""
    return None if _switch.declining else _native


def available() -> str | None:
    """Which kernels run here: "C (AVX2)", "C" (the portable path), or None (numpy)."""
    if _native is None:
        return None
    return "C (AVX2)" if _native.AVX2 else "C"


@contextmanager
def numpy_only() -> Iterator[None]:
    """Every kernel declines while it lasts, as in an install without a C compiler: what the tests and
    benchmarks.kernels_ab compare the kernels against. Not for serving."""
    before, _switch.declining = _switch.declining, True
    try:
        yield
    finally:
        _switch.declining = before


def top_per_row(values: FloatArray, n: int) -> IntArray | None:
    """The columns of each row's n largest values (N, n), ascending, lower columns among equal
    values; None where the kernel does not apply (not built, not float32, n over its MAX_N, a NaN)."""
    N, V = values.shape
    kernels = _kernels()
    if kernels is None or values.dtype != np.float32 or not 0 < n <= min(kernels.MAX_N, V) or N == 0:
        return None
    out = np.empty((N, n), dtype=np.int64)
    return out if kernels.top_per_row(np.ascontiguousarray(values), n, out) else None


def beam_candidates(
    log_probs: FloatArray, cum: npt.NDArray[np.float64], K: int, n: int
) -> tuple[IntArray, IntArray, npt.NDArray[np.float64]] | None:
    """Each sentence's min(2K, K·n) best continuations over its K rows' n best tokens, best first:
    the row each extends, its token, its cumulative log-prob, (A, C) each; equal totals go to the lower
    row, then the lower token. None where the kernel does not take them (as top_per_row, and a NaN total)."""
    N, V = log_probs.shape
    kernels = _kernels()
    if kernels is None or log_probs.dtype != np.float32 or cum.dtype != np.float64:
        return None
    if not 0 < n <= min(kernels.MAX_N, V) or K < 1 or N % K or N == 0:
        return None
    A, C = N // K, min(2 * K, K * n)
    rows, tokens, totals = np.empty((A, C), np.int64), np.empty((A, C), np.int64), np.empty((A, C))
    values, scores = np.ascontiguousarray(log_probs), np.ascontiguousarray(cum)
    return (rows, tokens, totals) if kernels.beam_candidates(values, scores, K, n, rows, tokens, totals) else None


def write_slots(caches: Sequence[npt.NDArray[Any]], values: Sequence[npt.NDArray[Any]], positions: IntArray) -> bool:
    """Row b's values[i][b] into caches[i][b, :, positions[b], :], every cache (B, H, P, D) at once; False,
    nothing written, where the kernel does not take them (not built, not float32, not contiguous)."""
    kernels = _kernels()
    if kernels is None:
        return False
    try:
        kernels.write_slots(tuple(caches), tuple(values), positions)
    except (ValueError, BufferError):  # checked before any write
        return False
    return True


def move_rows(arrays: Sequence[npt.NDArray[Any]], rows: IntArray, moved: IntArray) -> bool:
    """In place, every array (batch first): x[moved] = x[rows[moved]], sources read before any write;
    False, nothing moved, where the kernel does not take them (not built, not contiguous, read-only)."""
    kernels = _kernels()
    if kernels is None:
        return False
    try:
        kernels.move_rows(tuple(arrays), rows, moved)
    except (ValueError, BufferError):  # checked before any write
        return False
    return True


@dataclass
class GreedyTables:
    """A greedy search's record, (B, T) each: every sentence's tokens, their log-probs, and the row each
    step's attention holds it at."""

    tokens: IntArray
    scores: FloatArray
    places: IntArray


def greedy_choose(
    log_probs: FloatArray, rows: IntArray, step: int, lengths: IntArray, eos: int, tables: GreedyTables
) -> tuple[IntArray, int] | None:
    """Each row's best token (the lowest column among equal values, as argmax), written with its log-prob
    and row into `tables` at [rows, step]; the tokens and how many rows end (EOS, or their length
    reached). None, nothing written, where the kernel does not apply (not built, not float32 or not
    contiguous, a NaN)."""
    kernels = _kernels()
    if kernels is None:
        return None
    chosen = np.empty(len(rows), dtype=np.int64)
    try:  # the kernel checks types, shapes and contiguity itself, before any write
        ending = kernels.greedy_choose(
            log_probs, rows, step, lengths, eos, tables.tokens, tables.scores, tables.places, chosen
        )
    except (ValueError, BufferError):
        return None
    return (chosen, ending) if ending >= 0 else None
