"""benchmarks/kernels_ab.py: the kernels and numpy, paired on one engine; native.numpy_only really
switches every kernel off, and back on. benchmarks/fusion_ab.py pairs two engines the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import fusion_ab, kernels_ab
from benchmarks.engines import EngineSpec, OrtEngine
from service.engine import beam, native


def test_numpy_only_switches_every_kernel_off_and_back(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    extension = native._native

    class Recorder:  # the extension, each kernel recorded when called
        def __getattr__(self, name: str) -> object:
            kernel = getattr(extension, name)
            if not callable(kernel):
                return kernel

            def recorded(*args: object) -> object:
                calls.append(name)
                return kernel(*args)

            return recorded

    monkeypatch.setattr(native, "_native", Recorder())
    values = np.random.default_rng(0).standard_normal((4, 2000)).astype(np.float32)
    with native.numpy_only():
        beam.top_per_row(values, 8)
        assert not native.move_rows([values.copy()], np.array([1, 0, 2, 3]), np.array([0, 1]))
    assert calls == []
    beam.top_per_row(values, 8)
    assert native.move_rows([values.copy()], np.array([1, 0, 2, 3]), np.array([0, 1]))
    assert calls == ["top_per_row", "move_rows"]


def test_a_paired_cell_gives_a_ratio_a_round(bundle_dir: Path) -> None:
    engine = OrtEngine(EngineSpec("ort", "", str(bundle_dir / "en-zh"), "intra1", 1, 1))
    sources = [[5, 9, 14, 3], [7, 8, 11, 3]] * 4
    ratios = kernels_ab.paired(engine, sources, (4, 1), 6, rounds=2)
    assert len(ratios) == 2 and all(r > 0 for r in ratios)


def test_the_fusion_pairing_gives_a_ratio_a_round_on_two_engines(bundle_dir: Path) -> None:
    """The bundle fused and as written, one timer switching between them."""
    fused, written = fusion_ab.engines(bundle_dir / "en-zh-int8", 1, "both")
    assert fused.model.fused and not written.model.fused
    fused, written = fusion_ab.engines(bundle_dir / "en-zh-int8", 1, "attention")
    assert "CacheAttention" in fused.model.fused["decoder"] and "CacheAttention" not in written.model.fused["decoder"]
    fused, copied = fusion_ab.engines(bundle_dir / "en-zh-int8", 1, "sources")
    assert fused.model.fused == copied.model.fused and fused.model.indexed and not copied.model.indexed
    timer = fusion_ab._timer(fused, written, [[5, 9, 14, 3], [7, 8, 11, 3]], 4, 1, 6)
    ratios = kernels_ab.alternated(timer, rounds=2)
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
