"""The side-by-side benchmark's harness end to end, on the tiny model: every section, one round."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.compare import main
from benchmarks.report import END, START


@pytest.mark.timeout(900)
def test_quick_benchmark_runs_every_section(trained_tiny_run: Path, synthetic_corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_tiny_run, run)
    markdown = tmp_path / "benchmarks.md"
    markdown.write_text(f"# Benchmarks\n\nprose\n\n{START}\nold\n{END}\n\nmore prose\n")
    out = tmp_path / "bench.json"
    results = main(
        [
            "--run",
            str(run),
            "--corpus",
            str(synthetic_corpus),
            "--quick",
            "--out",
            str(out),
            "--markdown",
            str(markdown),
        ]
    )
    assert json.loads(out.read_text())["machine"]["gemm_gflops"] > 0
    assert len(results["fixed_length"]) == 8
    for row in results["fixed_length"]:
        assert set(row["engines"]) == {"ort", "ct2", "torch"}
        for engine in row["engines"].values():
            assert engine["tokens_per_s"] > 0
            assert engine["ratio_to_ct2"] > 0
    # same work: every engine generated exactly 20 tokens per sentence, so tokens/s compare
    for row in results["real_data"]:
        assert {"bleu", "chrf"} <= set(row["engines"]["ort"])
    assert set(results["step_ms_by_position"]) >= {"8", "32"}
    text = markdown.read_text()
    assert "old" not in text and "prose" in text and "more prose" in text and "| greedy/b1/fp32 |" in text
