"""The C kernels (service/engine/_native.c) against the numpy they replace, paired in one process.

    python -m benchmarks.kernels_ab --bundle runs/en-zh-shipped/bench/ort-fp32 [--rounds 11] [--threads 1]

One engine (benchmarks.engines.OrtEngine: the service's own search on the bundle's graphs) decodes
the same work with the kernels and with them switched off (service/engine/native.py's numpy_only),
alternating every round and reversing the order every other round. So the drift of a shared machine
falls on both alike. Alternating fresh processes did not give that on a noisy host: per-round
ratios ranged from 0.57 to 1.67 there.

The work is the four cells (greedy and beam 4, batch 1 and 32): fixed-length sources (20 tokens, EOS
suppressed, as benchmarks.compare) and the Tatoeba test split's real sentences (benchmarks.http_bench's
`sentences`, which falls back to four fixed ones and says so). Printed: numpy's time ÷ the kernels',
the median of the rounds with its range, a line per cell.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.engines import EngineSpec, OrtEngine
from benchmarks.http_bench import sentences
from benchmarks.workloads import fixed_sources, real_sources
from service.engine import native
from service.engine.bundle import load_bundle
from service.engine.tokenizer_loading import load_tokenizers

CELLS = ((1, 1), (4, 1), (1, 32), (4, 32))  # (beam, batch)
FIXED = 20


def seconds_a_sentence(
    engine: OrtEngine, sources: list[list[int]], beam_size: int, batch: int, fixed: int | None
) -> float:
    start = time.perf_counter()
    for i in range(0, len(sources), batch):
        engine.translate(sources[i : i + batch], beam_size, fixed, 64)
    return (time.perf_counter() - start) / len(sources)


def alternated(timed: Callable[[bool], float], rounds: int) -> list[float]:
    """timed(False) ÷ timed(True), a ratio a round: the two in turn, the first of each round alternating."""
    timed(True), timed(False)  # warm both
    ratios = []
    for r in range(rounds):
        first = r % 2 == 0
        a = timed(first)
        b = timed(not first)
        on, off = (a, b) if first else (b, a)
        ratios.append(off / on)
    return ratios


def paired(
    engine: OrtEngine, sources: list[list[int]], cell: tuple[int, int], fixed: int | None, rounds: int
) -> list[float]:
    """numpy's time ÷ the kernels', a ratio a round."""
    beam_size, batch = cell
    work = sources[: 8 if batch == 1 else 32]

    def timed(kernels: bool) -> float:
        if kernels:
            return seconds_a_sentence(engine, work, beam_size, batch, fixed)
        with native.numpy_only():
            return seconds_a_sentence(engine, work, beam_size, batch, fixed)

    return alternated(timed, rounds)


def workloads(bundle: Path) -> dict[str, tuple[list[list[int]], int | None]]:
    """name -> (sources, fixed length or None): fixed-length sources and the test split's sentences."""
    loaded = load_bundle(bundle)
    source_tokenizer, _ = load_tokenizers(loaded)
    texts = sentences(loaded.manifest.source_lang, 64).texts
    return {
        "fixed": (fixed_sources(source_tokenizer, texts, 32, FIXED), FIXED),
        "real": (real_sources(source_tokenizer, texts, loaded.manifest.limits.max_source_tokens), None),
    }


def run(bundle: Path, rounds: int, threads: int) -> list[dict[str, Any]]:
    if native.available() is None:
        raise SystemExit("the C kernels are not built here: nothing to compare (pip install -e . with a C compiler)")
    engine = OrtEngine(EngineSpec("ort", "", str(bundle), f"intra{threads}", threads, 1))
    rows = []
    for name, (sources, fixed) in workloads(bundle).items():
        for cell in CELLS:
            ratios = paired(engine, sources, cell, fixed, rounds)
            rows.append({"work": name, "beam": cell[0], "batch": cell[1], "ratios": ratios})
            print(line(rows[-1], "numpy / kernels"), flush=True)
    return rows


def line(row: dict[str, Any], what: str) -> str:
    ratios = row["ratios"]
    search = "greedy" if row["beam"] == 1 else f"beam {row['beam']}"
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
    return f"{row['work']:5s} {search} x {row['batch']:<2d}: {what} {statistics.median(ratios):.3f} ({spread})"


def parser(description: str | None) -> argparse.ArgumentParser:
    """The command line of a paired comparison on one bundle (this one's and benchmarks.fusion_ab's)."""
    found = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--bundle", type=Path, required=True)
    found.add_argument("--rounds", type=int, default=11)
    found.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    return found


def command(description: str | None, run: Callable[[Path, int, int], object]) -> None:
    args = parser(description).parse_args()
    run(args.bundle, args.rounds, args.threads)


def main() -> None:
    command(__doc__, run)


if __name__ == "__main__":
    main()
