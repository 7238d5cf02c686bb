"""The benchmark's other sections: real test sentences with BLEU, the roofline, and scaling.

Legend: S source length, P past length (positions already decoded).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.roofline import Machine, bound_seconds, transformer_step_cost
from benchmarks.worker import Job, Result, Worker
from benchmarks.workloads import Cell, fixed_sources
from service.engine.tokenizer import Tokenizer


def real_data(
    cell: Cell,
    chosen: dict[str, Worker],
    sources: list[list[int]],
    references: list[str],
    decode: Tokenizer,
    target: str,
    max_target: int,
    rounds: int = 3,
) -> dict[str, Any]:
    """Each engine, at its best setting for the cell, on test sentences: speed and BLEU side by side.
    The engines take turns for `rounds` passes; speed is each engine's median pass, and `ratio_to_ct2`
    the median of the passes' ratios, as the fixed-length cells are measured (one pass each swung
    with the host by more than the differences it was read for)."""
    from models.metrics import score  # noqa: PLC0415

    job = Job(sources, cell.beam, None, max_target, cell.batch)
    passes: dict[str, list[Result]] = {name: [] for name in chosen}
    for _ in range(rounds):
        for name, worker in chosen.items():
            passes[name].append(worker.run(job))
    row: dict[str, Any] = {"cell": cell.key, "rounds": rounds, "engines": {}}
    for name, results in passes.items():
        first = results[0]
        hyps = [decode.decode_text(ids) for ids in first.outputs]
        speeds = [speed(r) for r in results]
        row["engines"][name] = {
            "setting": chosen[name].spec.setting,
            "tokens_per_s": statistics.median(speeds),
            "tokens_per_s_rounds": speeds,
            "sentences_per_s": len(sources) / statistics.median(r.seconds for r in results),
            **score(hyps, references, target),
        }
    if "ort" in passes and "ct2" in passes:
        ratios = [speed(o) / speed(c) for o, c in zip(passes["ort"], passes["ct2"], strict=True)]
        row["ratio_to_ct2"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return row


def speed(result: Result) -> float:
    """Tokens of the best hypotheses a second."""
    return result.generated / result.seconds


def roofline(
    cells: list[dict[str, Any]], model_config: dict[str, Any], machine: Machine, fixed_length: int
) -> list[dict[str, Any]]:
    """Each cell's measured step time against its bound (cost at S = 20 and the mean past length)."""
    cost = transformer_step_cost(model_config, src_len=fixed_length, past=fixed_length // 2)
    rows = []
    for row in cells:
        search, batch, precision = row["cell"].split("/")
        beam = 1 if search == "greedy" else int(search.removeprefix("beam"))
        rows_decoded = int(batch.removeprefix("b")) * beam
        bound, kind = bound_seconds(cost, machine, precision, rows_decoded)
        entry: dict[str, Any] = {"cell": row["cell"], "bound": kind, "bound_ms_per_step": bound * 1000}
        for name, e in row["engines"].items():
            # tokens/s of best hypotheses: one step per token per sentence; a step serves the whole batch
            step_s = int(batch.removeprefix("b")) / e["tokens_per_s"]
            entry[name] = {"ms_per_step": step_s * 1000, "fraction": bound / step_s}
        rows.append(entry)
    return rows


def step_time_by_position(
    bundle: Path, positions: tuple[int, ...], src_len: int = 20, reps: int = 200
) -> dict[str, float]:
    """Median time of one decoder step (batch 1, fp32, 1 thread) after P-1 cached positions."""
    from service.engine.bundle import load_bundle  # noqa: PLC0415
    from service.engine.onnx_model import OnnxSeq2Seq, SessionConfig  # noqa: PLC0415

    model = OnnxSeq2Seq(load_bundle(bundle), SessionConfig(intra_op_threads=1, inter_op_threads=1))
    ids = np.full((1, src_len), 5, dtype=np.int64)
    ids[0, -1] = 3
    state = model.encode(ids, ids == 0)
    token = np.array([2], dtype=np.int64)
    out: dict[str, float] = {}
    for p in range(1, max(positions) + 1):
        if p in positions:
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                model.step(token, state)
                times.append(time.perf_counter() - t0)
            out[str(p)] = statistics.median(times) * 1000
        _, _, state = model.step(token, state)
        token = np.array([5 + p % 50], dtype=np.int64)
    return out


def throughput_by_length(
    chosen: dict[str, Worker], tokenizer: Tokenizer, texts: list[str], lengths: tuple[int, ...], generated: int
) -> dict[str, dict[str, float]]:
    """Greedy batch-32 tokens/s as the source grows (the encoder's share and cross-attention's)."""
    out: dict[str, dict[str, float]] = {name: {} for name in chosen}
    for length in lengths:
        job = Job(fixed_sources(tokenizer, texts, 32, length, seed=length), 1, generated, generated, 32)
        for name, worker in chosen.items():
            worker.run(job)
            result = worker.run(job)
            out[name][str(length)] = result.generated / result.seconds
    return out
