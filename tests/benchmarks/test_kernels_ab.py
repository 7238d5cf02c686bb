"""benchmarks/kernels_ab.py: the kernels and numpy, paired on one engine; numpy_only really
switches every kernel off, and back on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import kernels_ab
from benchmarks.engines import EngineSpec, OrtEngine
from service.engine import beam, native


def test_numpy_only_switches_every_kernel_off_and_back(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for module, name, _ in kernels_ab.KERNELS:  # each kernel recorded when called
        kernel = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args, _k=kernel, _n=name: calls.append(_n) or _k(*args))
    values = np.random.default_rng(0).standard_normal((4, 2000)).astype(np.float32)
    with kernels_ab.numpy_only():
        beam.top_per_row(values, 8)
        assert not native.move_rows([values.copy()], np.array([1, 0, 2, 3]), np.array([0, 1]))
    assert calls == []
    beam.top_per_row(values, 8)
    assert native.move_rows([values.copy()], np.array([1, 0, 2, 3]), np.array([0, 1]))
    assert calls == ["top_per_row_native", "move_rows"]


def test_a_paired_cell_gives_a_ratio_a_round(bundle_dir: Path) -> None:
    engine = OrtEngine(EngineSpec("ort", "", str(bundle_dir / "en-zh"), "intra1", 1, 1))
    sources = [[5, 9, 14, 3], [7, 8, 11, 3]] * 4
    ratios = kernels_ab.paired(engine, sources, (4, 1), 6, rounds=2)
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
