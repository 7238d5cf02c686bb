"""An int8 bundle's graphs fused (service/engine/quant_fusion.py) against as written, paired in one
process.

    python -m benchmarks.fusion_ab --bundle runs/en-zh-shipped/bench/ort-int8 [--rounds 11] [--threads 1]

Two engines on the one bundle, one loading its graphs with the row quantizations as the
attention_mt operators and one as the bundle has them, decode the same work in turn, alternating
which goes first, as benchmarks.kernels_ab does (its work: the four cells, fixed-length and real
sentences). Printed: the unfused time ÷ the fused, the median of the rounds with its range.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.engines import EngineSpec, OrtEngine
from benchmarks.kernels_ab import CELLS, alternated, command, line, seconds_a_sentence, workloads
from service.engine import quant_fusion


def run(bundle: Path, rounds: int, threads: int) -> list[dict[str, Any]]:
    if quant_fusion.library() is None:
        raise SystemExit("the operator library is not built here (pip install -e . with a C compiler)")
    spec = EngineSpec("ort", "int8", str(bundle), f"intra{threads}", threads, 1)
    fused, written = OrtEngine(spec), OrtEngine(EngineSpec(**{**vars(spec), "fuse_quantization": False}))
    if not fused.model.fused:
        raise SystemExit(f"{bundle}: no row quantizations to fuse (an fp32 bundle?)")
    rows = []
    for name, (sources, fixed) in workloads(bundle).items():
        for beam_size, batch in CELLS:
            work = sources[: 8 if batch == 1 else 32]
            ratios = alternated(_timer(fused, written, work, beam_size, batch, fixed), rounds)
            rows.append({"work": name, "beam": beam_size, "batch": batch, "ratios": ratios})
            print(line(rows[-1], "unfused / fused"), flush=True)
    return rows


def _timer(
    fused: OrtEngine, written: OrtEngine, work: list[list[int]], beam_size: int, batch: int, fixed: int | None
) -> Callable[[bool], float]:
    """Seconds a sentence of the work, on the fused engine (True) or the other."""
    return lambda on: seconds_a_sentence(fused if on else written, work, beam_size, batch, fixed)


def main() -> None:
    command(__doc__, run)


if __name__ == "__main__":
    main()
