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
    done = cli("rescore", bundle, "--corpus", synthetic_corpus, "--real-text", synthetic_corpus)
    assert done.returncode == 0, done.stderr
    after = load_bundle(bundle).manifest  # checksums still verify
    assert after.files == before.files
    assert after.model_dump(exclude={"quality"}) == before.model_dump(exclude={"quality"})
    assert [(q.split, q.beam) for q in after.quality] == [("test", 1), ("test", 4), ("news-test", 1), ("news-test", 4)]
    assert all(q.coverage_penalty == SearchOptions().coverage_penalty for q in after.quality)
    assert all(q.loop_rate is not None and q.no_repeat_ngram == before.search.no_repeat_ngram for q in after.quality)
    tuned = cli(
        "rescore", bundle, "--corpus", synthetic_corpus, "--real-text", synthetic_corpus,
        "--no-repeat-ngram", "2", "--ratio-from-data",
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    search = load_bundle(bundle).manifest.search
    assert search.no_repeat_ngram == 2 and search.max_output_slack == 5
    assert search.max_output_ratio is not None and search.max_output_ratio != 2.0  # measured on the training split
    assert all(q.no_repeat_ngram == 2 for q in load_bundle(bundle).manifest.quality)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
    broken = cli("rescore", tmp_path / "missing", "--corpus", synthetic_corpus)
    assert broken.returncode == 2 and "missing" in broken.stderr
