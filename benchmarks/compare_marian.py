"""The OPUS-MT-size cells: our engine against CTranslate2 on one Marian checkpoint, each converted
by its own converter (issue 17).

    python -m benchmarks.opus_size --out build/opus-size        # the checkpoint: d 512, 6+6, V 65,001
    python -m benchmarks.compare_marian --checkpoint build/opus-size/checkpoint [--rounds 5] \\
        [--out docs/measurements/bench-opus-size.json] [--settings intra1,intra2,mkl-inter2x1]

Ours: `convert-hf` to fp32 and int8 bundles (parity with transformers checked as it converts).
CTranslate2: its own `TransformersConverter` (fp32 on disk, int8 as its load-time compute type).
The work is benchmarks.compare's fixed-length mode (20 source tokens, exactly 20 generated, EOS
suppressed; best thread setting per engine and cell, then interleaved rounds). The weights are
random, so there is speed and memory here, not BLEU; PyTorch is not in these cells.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.artifacts import Artifacts
from benchmarks.compare import Plan, close_workers, peak_rss, run_cells, save, sentences_needed, start_workers
from benchmarks.report import fixed_table, rss_table

# ours with two intra-op threads too: on a machine where one core cannot draw the memory bandwidth
# that fp32 at batch 1 needs (232 MB of weights a token), the second thread is worth 1.6x there.
# CTranslate2 on MKL too: on an Intel Xeon with VNNI and AMX its MKL backend won every int8 cell of
# the shipped model, and oneDNN alone left it at 0.23x ours at OPUS-MT size (2026-12-07, eighth)
SETTINGS = ("intra1", "intra2", "split2x1", "dnnl-intra2", "dnnl-inter2x1", "mkl-intra1", "mkl-inter2x1")


def build_marian_artifacts(checkpoint: Path, work: Path) -> Artifacts:
    """Both engines' models of `checkpoint`, each by its own converter (skips what exists)."""
    from export.convert_hf import ConvertOptions, convert_hf  # noqa: PLC0415

    arts = Artifacts(checkpoint, work / "ort-fp32", work / "ort-int8", work / "ct2")
    for path, int8 in ((arts.ort_fp32, False), (arts.ort_int8, True)):
        if not (path / "manifest.json").is_file():
            convert_hf(checkpoint, path, ConvertOptions("en", "zh", int8=int8, force=True))
    if not (arts.ct2 / "model.bin").is_file():
        import ctranslate2  # type: ignore[import-untyped]  # noqa: PLC0415

        ctranslate2.converters.TransformersConverter(str(checkpoint)).convert(str(arts.ct2), force=True)
    return arts


def marian_sources(arts: Artifacts, n: int, length: int, seed: int = 0) -> list[list[int]]:
    """n sources of `length` ids each (the last EOS), drawn from the vocabulary's real pieces."""
    manifest = json.loads((arts.ort_fp32 / "manifest.json").read_text(encoding="utf-8"))
    special = manifest["special_ids"]
    vocab: dict[str, int] = json.loads((arts.checkpoint / "vocab.json").read_text(encoding="utf-8"))
    pieces = sorted(i for t, i in vocab.items() if not t.startswith("<") and not t.startswith(">>"))
    rng = np.random.default_rng(seed)
    return [[*map(int, rng.choice(pieces, length - 1)), special["eos"]] for _ in range(n)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a Marian checkpoint directory")
    parser.add_argument("--work", type=Path, help="artifact cache (default: <checkpoint>/../bench)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 round, few sentences: checks the harness")
    parser.add_argument("--out", type=Path, help="JSON results")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated thread settings to try")
    args = parser.parse_args(argv)
    # a 65k-vocabulary beam-4 batch of 32 takes ~15 s a call here: one batch a round, and each
    # engine's settings that won the en-zh cells (benchmarks.compare tries them all)
    settings = tuple(args.settings.split(","))
    plan = Plan(rounds=args.rounds, batch32_calls=1, engines=("ort", "ct2"), settings=settings)
    if args.quick:
        plan = Plan(1, batch1_sentences=2, batch32_calls=1, engines=("ort", "ct2"), settings=("intra1", "dnnl-intra1"))
    arts = build_marian_artifacts(args.checkpoint, args.work or args.checkpoint.parent / "bench")
    workers = start_workers(plan, arts)
    try:
        sources = marian_sources(arts, sentences_needed(plan), plan.fixed_length)
        cells, _ = run_cells(plan, workers, sources)
        results = {"checkpoint": str(args.checkpoint), "fixed_length": cells, "peak_rss_mb": peak_rss(workers)}
    finally:
        close_workers(workers)
    save(results, args.out)
    print(fixed_table(results), rss_table(results), sep="\n\n")
    return results


if __name__ == "__main__":
    main()
