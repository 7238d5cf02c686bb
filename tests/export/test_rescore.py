"""Rescoring a bundle: fresh quality figures through the current search, nothing else touched."""

from __future__ import annotations

import shutil
from pathlib import Path

from service.engine.bundle import load_bundle
from service.engine.translator import SearchOptions
from tests.conftest import cli


def test_rescore_rewrites_only_the_quality(bundle_dir: Path, synthetic_corpus: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(bundle_dir / "en-zh", bundle)
    before = load_bundle(bundle).manifest
    done = cli("rescore", bundle, "--corpus", synthetic_corpus)
    assert done.returncode == 0, done.stderr
    after = load_bundle(bundle).manifest  # checksums still verify
    assert after.files == before.files
    assert after.model_dump(exclude={"quality"}) == before.model_dump(exclude={"quality"})
    assert [q.beam for q in after.quality] == [1, 4]
    assert all(q.coverage_penalty == SearchOptions().coverage_penalty for q in after.quality)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
    broken = cli("rescore", tmp_path / "missing", "--corpus", synthetic_corpus)
    assert broken.returncode == 2 and "missing" in broken.stderr
