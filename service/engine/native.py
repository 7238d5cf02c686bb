"""The C kernels of service/engine/_native.c, where the install built them.

The extension is optional (pyproject.toml): an install without a C compiler serves with numpy
instead, with the same results (the beam's columns: service/engine/beam.py's `top_per_row`; the
cache slots: onnx_model.py's `write_slots`). Each function here says when the kernel did not apply.
"""

from __future__ import annotations

from collections.abc import Sequence
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

MAX_N = 64  # the kernel's largest n


def available() -> str | None:
    """What selects the beam's candidates here: "C (AVX2)", "C", or None for numpy."""
    if _native is None:
        return None
    return "C (AVX2)" if _native.AVX2 else "C"


def top_per_row(values: FloatArray, n: int) -> IntArray | None:
    """The columns of each row's n largest values (N, n), ascending, lower columns among equal
    values; None where the kernel does not apply (not built, not float32, n over MAX_N, a NaN)."""
    N, V = values.shape
    if _native is None or values.dtype != np.float32 or not 0 < n <= min(MAX_N, V) or N == 0:
        return None
    out = np.empty((N, n), dtype=np.int64)
    return out if _native.top_per_row(np.ascontiguousarray(values), n, out) else None


def write_slots(caches: Sequence[npt.NDArray[Any]], values: Sequence[npt.NDArray[Any]], positions: IntArray) -> bool:
    """Row b's values[i][b] into caches[i][b, :, positions[b], :], every cache (B, H, P, D) at once; False,
    nothing written, where the kernel does not take them (not built, not float32, not contiguous)."""
    if _native is None:
        return False
    try:
        _native.write_slots(tuple(caches), tuple(values), positions)
    except ValueError:  # checked before any write
        return False
    return True
