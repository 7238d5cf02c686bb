"""A bundle's graphs fused (service/engine/graph_fusion.py) against without one fusion, paired in one
process.

    python -m benchmarks.fusion_ab --bundle runs/en-zh-shipped/bench/ort-int8 [--without rows|attention|sources|both]
        [--rounds 11] [--threads 1]

Two engines on the one bundle, one loading its graphs with every fusion (an int8 graph's row
quantizations, the decoder step's attentions, their cross-attentions reading each sentence's keys
once) and one without the fusion named (both: the graphs as the bundle has them), decode the same
work in turn, alternating which goes first, as benchmarks.kernels_ab does (its work: the four cells,
fixed-length and real sentences). Printed: the time without ÷ the time with, the median of the
rounds with its range.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.engines import EngineSpec, OrtEngine
from benchmarks.kernels_ab import CELLS, alternated, line, parser, seconds_a_sentence, workloads
from service.engine import graph_fusion

WITHOUT = {
    "rows": {"fuse_quantization": False},
    "attention": {"fuse_attention": False},
    "sources": {"index_sources": False},
    "both": {"fuse_quantization": False, "fuse_attention": False},
}


def engines(bundle: Path, threads: int, without: str) -> tuple[OrtEngine, OrtEngine]:
    """The bundle with every fusion, and without the one named."""
    spec = EngineSpec("ort", "int8", str(bundle), f"intra{threads}", threads, 1)
    fused, other = OrtEngine(spec), OrtEngine(EngineSpec(**{**vars(spec), **WITHOUT[without]}))
    if (fused.model.fused, fused.model.indexed) == (other.model.fused, other.model.indexed):
        raise SystemExit(f"{bundle}: nothing for {without} to fuse (rows: an fp32 bundle?)")
    return fused, other


def run(bundle: Path, rounds: int, threads: int, without: str = "both") -> list[dict[str, Any]]:
    if graph_fusion.library() is None:
        raise SystemExit("the operator library is not built here (pip install -e . with a C compiler)")
    fused, written = engines(bundle, threads, without)
    rows = []
    for name, (sources, fixed) in workloads(bundle).items():
        for beam_size, batch in CELLS:
            work = sources[: 8 if batch == 1 else 32]
            ratios = alternated(_timer(fused, written, work, beam_size, batch, fixed), rounds)
            rows.append({"work": name, "beam": beam_size, "batch": batch, "ratios": ratios})
            print(line(rows[-1], f"without {without} / fused"), flush=True)
    return rows


def _timer(
    fused: OrtEngine, written: OrtEngine, work: list[list[int]], beam_size: int, batch: int, fixed: int | None
) -> Callable[[bool], float]:
    """Seconds a sentence of the work, on the fused engine (True) or the other."""
    return lambda on: seconds_a_sentence(fused if on else written, work, beam_size, batch, fixed)


def main() -> None:
    found = parser(__doc__)
    found.add_argument("--without", choices=sorted(WITHOUT), default="both", help="the fusion the other engine lacks")
    args = found.parse_args()
    run(args.bundle, args.rounds, args.threads, args.without)


if __name__ == "__main__":
    main()
