"""One engine in its own process, driven over a pipe: the coordinator interleaves the engines.

Only one worker runs at a time, so engines never compete for the two cores, and each reports the
peak RSS of its own process (runtime, weights and buffers; the interpreter's base is reported too).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import resource
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from benchmarks.engines import EngineSpec


@dataclass(frozen=True)
class Job:
    src_ids: list[list[int]]
    beam: int
    fixed: int | None
    max_target: int
    batch: int  # sentences per translate() call


@dataclass(frozen=True)
class Result:
    seconds: float
    generated: int  # target tokens produced (best hypotheses, EOS excluded)
    outputs: list[list[int]]
    call_seconds: list[float]  # per translate() call: latency per sentence at batch 1


def _peak_rss_mb() -> float:
    """This process's peak resident memory since exec. Not getrusage's ru_maxrss: Linux keeps that
    across fork and exec, so every spawned worker would report its parent's peak."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: the best there is


def _serve(conn: Connection, spec: EngineSpec) -> None:
    base = _peak_rss_mb()
    from benchmarks.engines import load_engine  # noqa: PLC0415

    try:
        engine = load_engine(spec)
    except Exception as exc:  # a setting this machine cannot run (e.g. a backend missing) is reported, not fatal
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", base))
    while True:
        message = conn.recv()
        if message is None:
            return
        job: Job = message
        outputs: list[list[int]] = []
        calls = []
        start = time.perf_counter()
        for i in range(0, len(job.src_ids), job.batch):
            t0 = time.perf_counter()
            outputs += engine.translate(job.src_ids[i : i + job.batch], job.beam, job.fixed, job.max_target)
            calls.append(time.perf_counter() - t0)
        seconds = time.perf_counter() - start
        conn.send(Result(seconds, sum(len(o) for o in outputs), outputs, calls))
        conn.send(_peak_rss_mb())


class Worker:
    """The coordinator's handle on one engine process."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, spec), daemon=True)
        self.process.start()
        status, detail = self.conn.recv()
        self.error: str | None = detail if status == "error" else None
        self.base_rss_mb: float = detail if status == "ready" else 0.0
        self.peak_rss_mb = 0.0

    def run(self, job: Job) -> Result:
        self.conn.send(job)
        result: Result = self.conn.recv()
        self.peak_rss_mb = max(self.peak_rss_mb, float(self.conn.recv()))
        return result

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()

    def describe(self) -> dict[str, Any]:
        return {"setting": self.spec.setting, "peak_rss_mb": round(self.peak_rss_mb, 1)}
