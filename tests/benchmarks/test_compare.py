"""The side-by-side benchmark's harness end to end, on the tiny model: every section, one round."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.compare import main
from benchmarks.compare_marian import main as compare_marian
from benchmarks.report import END, START
from benchmarks.step_bench import main as step_bench
from export.pipeline import ExportOptions, export_run


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
    for row in results["real_data"]:  # two passes each, the engines taking turns
        assert {"bleu", "chrf"} <= set(row["engines"]["ort"])
        assert all(len(e["tokens_per_s_rounds"]) == 2 for e in row["engines"].values())
        assert 0 < row["ratio_to_ct2"]["min"] <= row["ratio_to_ct2"]["median"] <= row["ratio_to_ct2"]["max"]
    assert set(results["step_ms_by_position"]) >= {"8", "32"}
    text = markdown.read_text()
    assert "old" not in text and "prose" in text and "more prose" in text and "| greedy/b1/fp32 |" in text
    assert "ort ÷ ct2 (rounds)" in text


def test_step_bench_times_graphs_side_by_side(
    trained_tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    bundle = export_run(trained_tiny_run, tmp_path / "bundle", ExportOptions(quality_split=None))
    decoder = str(bundle.file("decoder.onnx"))
    step_bench([decoder, decoder, "--batch", "1", "3", "--rounds", "2", "--steps", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["1", "1", "3", "3"]
    assert all("ms/step" in line and "nodes" in line for line in lines)


@pytest.mark.timeout(900)
def test_marian_cells_run_both_converters(marian_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    checkpoint, work = marian_checkpoints["en-de"], tmp_path / "work"
    results = compare_marian(["--checkpoint", str(checkpoint), "--work", str(work), "--quick", "--out", str(out)])
    assert json.loads(out.read_text())["fixed_length"] == results["fixed_length"]
    assert len(results["fixed_length"]) == 8
    for row in results["fixed_length"]:
        assert set(row["engines"]) == {"ort", "ct2"}
        assert all(e["tokens_per_s"] > 0 for e in row["engines"].values())
