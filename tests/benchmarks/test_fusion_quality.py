"""benchmarks/fusion_quality.py on the test bundle: both BLEUs, the differing translations and the
fused decoder's batching changes come out for each beam."""

from __future__ import annotations

from pathlib import Path

from benchmarks import fusion_quality
from models.data import Pair


def test_a_bundle_is_measured_fused_and_as_written(bundle_dir: Path) -> None:
    pairs = [Pair(en, zh, "test") for en, zh in [("Tom chases Jerry.", "汤姆追杰瑞。"), ("I am full.", "我饱了。")] * 3]
    found = fusion_quality.measure(bundle_dir / "en-zh", pairs, sentences=4)
    for key in ("bleu_fused", "bleu_written", "differing_translations", "batching_changes_fused"):
        assert set(found[key]) == set(fusion_quality.BEAMS), key
    assert all(0 <= n <= len(pairs) for n in found["differing_translations"].values())
