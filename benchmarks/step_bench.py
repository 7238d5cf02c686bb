"""One decoder step, graphs side by side: what a change to the step graph bought, without the search.

    git show 9d7b3f9:bundles/en-zh/decoder.onnx > /tmp/traced.onnx     # the traced step graph
    python -m benchmarks.step_bench /tmp/traced.onnx bundles/en-zh/decoder.onnx [--batch 1 32 128]

Every graph gets the same random inputs of its declared shapes (24 source tokens, a 32-slot cache
with every row at position 16, batch as given: widths the service gives, multiples of 8) in a
session made as the service makes a decoder's (service/engine/onnx_model.py). Each is warmed up,
then the graphs run in interleaved rounds (50 steps each, order rotating) on one thread; the
medians are printed with each graph's speed relative to the first. A graph whose state includes
whole caches copies them as the service would see them; one that returns only the step's entry is
timed without the service's in-place write (a (B, N, D) numpy assignment per layer, microseconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort

from service.engine.attention_fusion import SOURCE_ROWS, SOURCES
from service.engine.onnx_model import DECODER_DISABLED_OPTIMIZERS, SessionConfig, make_session

DIMS = {"src_len": 24, "cache_len": 32, "past_len": 32}


def session(path: str, threads: int) -> ort.InferenceSession:
    config = SessionConfig(intra_op_threads=threads, inter_op_threads=1, spinning=False)
    return make_session(path, config, disabled_optimizers=DECODER_DISABLED_OPTIMIZERS)


def feeds(sess: ort.InferenceSession, batch: int, seed: int = 0) -> dict[str, npt.NDArray[Any]]:
    rng = np.random.default_rng(seed)
    out: dict[str, npt.NDArray[Any]] = {}
    for i in sess.get_inputs():
        shape = [int(batch if d in ("batch", SOURCES) else DIMS[d] if isinstance(d, str) else d) for d in i.shape]
        if i.name == SOURCE_ROWS:  # a fused graph's: each row reads its own sentence's keys and values
            out[i.name] = np.arange(batch, dtype=np.int64)
        elif i.name == "prev_tokens":
            out[i.name] = rng.integers(4, 20, batch).astype(np.int64)  # any ids: speed does not depend on them
        elif i.name == "positions":
            out[i.name] = np.full(batch, DIMS["cache_len"] // 2, np.int64)
        elif i.name == "src_pad_mask":
            out[i.name] = np.zeros(shape, bool)
        else:
            out[i.name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    return out


def time_steps(paths: list[str], batch: int, threads: int, rounds: int, steps: int) -> list[float]:
    """Median ms per step of each graph, interleaved rounds."""
    sessions = [session(p, threads) for p in paths]
    inputs = [feeds(s, batch) for s in sessions]
    for s, f in zip(sessions, inputs, strict=True):
        for _ in range(10):
            s.run(None, f)
    times: list[list[float]] = [[] for _ in paths]
    for r in range(rounds):
        order = list(range(len(paths)))
        order = order[r % len(order) :] + order[: r % len(order)]
        for i in order:
            start = time.perf_counter()
            for _ in range(steps):
                sessions[i].run(None, inputs[i])
            times[i].append((time.perf_counter() - start) / steps * 1000)
    return [statistics.median(t) for t in times]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="+")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args(argv)
    nodes = [len(onnx.load(p, load_external_data=False).graph.node) for p in args.graphs]
    for batch in args.batch:
        ms = time_steps(args.graphs, batch, args.threads, args.rounds, args.steps)
        for path, n, t in zip(args.graphs, nodes, ms, strict=True):
            print(f"batch {batch:>3}  {t:8.3f} ms/step  x{ms[0] / t:.2f}  {n:4d} nodes  {path}", flush=True)


if __name__ == "__main__":
    main()
