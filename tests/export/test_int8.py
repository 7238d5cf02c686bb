"""int8: a tiny trained model still translates its training pairs, and the figures are recorded."""

from __future__ import annotations

from pathlib import Path

from export.pipeline import ExportOptions, export_run
from service.engine.translator import SearchOptions, Translator
from tests.conftest import cli
from tests.support.synthetic import synthetic_pairs


def test_int8_bundle_records_agreement_bleu_and_speed(trained_tiny_run: Path, tmp_path: Path) -> None:
    fp32 = export_run(trained_tiny_run, tmp_path / "fp32", ExportOptions(quality_split=None))
    int8 = export_run(trained_tiny_run, tmp_path / "int8", ExportOptions(quantize="int8", quality_split=None))
    q = int8.manifest.quantization
    assert q.mode == "int8" and q.method
    assert q.token_agreement is not None and 0.0 <= q.token_agreement <= 1.0
    assert q.bleu_fp32 is not None and q.bleu_int8 is not None and q.bleu_delta is not None
    assert q.speedup is not None and q.speedup > 0
    assert q.size_int8 is not None and q.size_fp32 is not None and q.size_int8 < q.size_fp32
    assert int8.manifest.parity.passed  # parity of the fp32 graphs it was quantized from

    # On its own training pairs, int8 agrees with fp32 at least as often as the recorded rate says
    # anything can: report both, and require most pairs to match.
    sources = [en for en, _ in synthetic_pairs()[:100]]
    a = Translator(fp32).translate_texts(sources, SearchOptions())
    b = Translator(int8).translate_texts(sources, SearchOptions())
    agreement = sum(x == y for x, y in zip(a, b, strict=True)) / len(sources)
    assert agreement >= 0.8, agreement


def test_export_cli(trained_tiny_run: Path, tmp_path: Path) -> None:
    result = cli("export", trained_tiny_run, "--out", tmp_path / "b", "--quantize", "int8", "--no-quality")
    assert result.returncode == 0, result.stderr
    assert "parity: ids identical on 100% of 200 sentences" in result.stdout
    again = cli("export", trained_tiny_run, "--out", tmp_path / "b")
    assert again.returncode == 2 and "pass --force" in again.stderr
    bad = cli("export", trained_tiny_run, "--out", tmp_path / "c", "--quantize", "int4")
    assert bad.returncode == 2 and "--quantize takes int8" in bad.stderr
