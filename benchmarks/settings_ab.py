"""Serving settings, or code, side by side: one server per variant, measured in interleaved rounds.

    python -m benchmarks.settings_ab --bundle bundles/en-zh MT_JOIN_DELAY_MS=0 MT_JOIN_DELAY_MS=5
    python -m benchmarks.settings_ab --bundle bundles/en-zh MT_INTRA_OP_SPINNING=true MT_INTRA_OP_SPINNING=false
    python -m benchmarks.settings_ab --bundle bundles/en-zh @HEAD~1 -     # the last commit's code against this tree's

Each variant is a set of MT_* settings (`A=1,B=2` for several) given to a real `attention-mt
serve` of its own, or `@REV` (optionally `@REV,MT_A=1`): the server runs the code of git revision
REV, from a worktree made for the run, with this checkout's bundles. All the servers run at once
and every round measures each in turn (the order reversed every other round), so drift on a shared
machine falls on every variant alike. A round takes, per server: one client's latency, request
after request (batch 1), 32 clients' greedy throughput, 16 clients' at beam 4, the latency of 2
clients (the cost a wait for company puts on light traffic), a short sentence's p99 while 32
clients keep the server busy, and a short sentence every 50 ms beside 16 clients sending real-text
(news) sentences: its p50 and p99, and their requests a second; at the end, each server's peak RSS.
Reported: the median of the rounds and each round's figure, so the spread shows. `--logs pipe`
sends the servers' log lines into a pipe another process reads, as a container's runtime reads its
stderr (the default, /dev/null, costs a server less a line).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.http_bench import (
    SHORT,
    Server,
    body_of,
    children,
    closed_loop,
    load,
    long_sentences,
    pct,
    probe_beside,
    probe_under_load,
    sentences,
    sequential,
)

SHORT_EVERY_S = 0.05  # the short sentence sent beside long ones: one every 50 ms


@dataclass(frozen=True)
class Variant:
    name: str
    env: dict[str, str] = field(default_factory=dict)  # MT_* settings
    rev: str | None = None  # a git revision whose code the server runs; None: this tree's


def variant(text: str) -> Variant:
    """`MT_A=1,MT_B=2` -> those settings; `@REV[,MT_A=1]` -> REV's code (with those); "-" for the defaults."""
    rev, _, rest = text[1:].partition(",") if text.startswith("@") else (None, "", text)
    if rev == "":
        raise argparse.ArgumentTypeError(f"{text!r}: expected @REV, a git revision, after the @")
    if rest in ("-", ""):
        return Variant(text if rev else "defaults", {}, rev)
    pairs = [item.partition("=") for item in re.split(r",(?=MT_)", rest)]  # a value may hold commas: [1,2]
    if any(not key.startswith("MT_") or not sep for key, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: expected MT_NAME=value[,MT_NAME=value], @REV or -")
    return Variant(text, {key: value for key, _, value in pairs}, rev)


@contextlib.contextmanager
def code_trees(revs: set[str]) -> Iterator[dict[str, Path]]:
    """A detached git worktree of each revision, removed afterwards: rev -> its directory."""
    trees: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="settings-ab-") as tmp:
        try:
            for i, rev in enumerate(sorted(revs)):
                trees[rev] = Path(tmp) / f"tree{i}"
                add = ["git", "worktree", "add", "--detach", str(trees[rev]), rev]
                made = subprocess.run(add, check=False, capture_output=True, text=True)
                if made.returncode:  # not a checkout, or no such revision: say git's reason
                    del trees[rev]
                    raise SystemExit(f"@{rev}: git worktree add failed: {made.stderr.strip()}")
                build_extensions(rev, trees[rev])
            yield trees
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=False, capture_output=True)


def build_extensions(rev: str, tree: Path) -> None:
    """The revision's C extensions (pyproject's ext-modules) built in its worktree, next to their
    sources, as `pip install -e .` builds this checkout's: a worktree holds only tracked files, so its
    server would otherwise import the revision's code without its kernels and operators, and run
    the numpy fallbacks against this tree's compiled ones."""
    build = [sys.executable, "-c", "import setuptools; setuptools.setup()", "build_ext", "--inplace"]
    built = subprocess.run(build, cwd=tree, check=False, capture_output=True, text=True)
    if built.returncode:
        raise SystemExit(f"@{rev}: building its C extensions failed: {built.stderr.strip()[-2000:]}")


def server_env(v: Variant, trees: dict[str, Path]) -> dict[str, str]:
    """The variant's settings, and for a revision its worktree first on the import path (the
    installed `attention-mt` then imports that code)."""
    return {**v.env, "PYTHONPATH": str(trees[v.rev])} if v.rev else v.env


@dataclass(frozen=True)
class Work:
    """The request bodies a round sends."""

    greedy: list[bytes]  # short everyday sentences (Tatoeba)
    beam4: list[bytes]
    long: list[bytes]  # real text (news), greedy
    probe: bytes  # one short sentence


async def one_round(port: int, work: Work, seconds: float) -> dict[str, float]:
    one = await sequential(port, work.greedy[:40])
    two = await closed_loop(port, work.greedy, 2, seconds)
    beside, long_rps = await probe_beside(port, work.probe, work.long, 16, seconds, every_s=SHORT_EVERY_S)
    return {
        "one_client_p50_ms": pct(one, 0.5),
        "rps_32": (await load(port, work.greedy, 32, seconds))[0],
        "rps_16_beam4": (await load(port, work.beam4, 16, seconds))[0],
        "two_clients_p50_ms": pct(two, 0.5),
        "two_clients_p99_ms": pct(two, 0.99),
        "short_p99_under_32_ms": pct(await probe_under_load(port, work.probe, work.greedy, 32, seconds), 0.99),
        "short_p50_beside_16_long_ms": pct(beside, 0.5),
        "short_p99_beside_16_long_ms": pct(beside, 0.99),
        "rps_16_long": long_rps,
    }


async def measure(servers: dict[str, Server], bundle: Path, rounds: int, seconds: float) -> dict[str, Any]:
    source = bundle.name.split("-")[0]
    texts = sentences(source, 100).texts
    work = Work(
        greedy=[body_of(t, bundle.name, 1) for t in texts],
        beam4=[body_of(t, bundle.name, 4) for t in texts],
        long=[body_of(t, bundle.name, 1) for t in long_sentences(source, 100).texts],
        probe=body_of(SHORT.get(source, texts[0]), bundle.name, 1),
    )
    for server in servers.values():  # warm-up
        await load(server.port, work.greedy, 32, 2)
    runs: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    for r in range(rounds):
        order = list(servers.items())
        for name, server in order if r % 2 == 0 else order[::-1]:  # each variant first in every other round
            for figure, value in (await one_round(server.port, work, seconds)).items():
                runs[name].setdefault(figure, []).append(value)
    results: dict[str, Any] = {
        name: {figure: {"median": statistics.median(v), "rounds": v} for figure, v in figures.items()}
        for name, figures in runs.items()
    }
    for name, server in servers.items():
        peak = peak_rss_mb(server.proc.pid)
        results[name]["peak_rss_mb"] = {"median": peak, "rounds": [peak]}
    return results


def peak_rss_mb(pid: int) -> float:
    """The peak resident memory (Linux's VmHWM) of the process and its children (MT_WORKERS's
    workers), added up; 0 where /proc has none."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0
    own = next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmHWM:")), 0.0)
    return own + sum(peak_rss_mb(child) for child in children(pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="each figure's phase")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--logs",
        choices=("null", "pipe"),
        default="null",
        help="the servers' log lines into /dev/null, or into a pipe another process reads (as in a container)",
    )
    parser.add_argument(
        "variants",
        nargs="+",
        type=variant,
        help="MT_NAME=value[,...], @REV[,MT_NAME=value,...], or - for defaults",
    )
    args = parser.parse_args()
    with code_trees({v.rev for v in args.variants if v.rev}) as trees:
        pipe = args.logs == "pipe"
        servers = {v.name: Server(args.bundle, env=server_env(v, trees), log_pipe=pipe) for v in args.variants}
        try:
            results = asyncio.run(measure(servers, args.bundle, args.rounds, args.seconds))
        finally:
            for server in servers.values():
                server.stop()
    for name, figures in results.items():
        line = ", ".join(f"{figure} {r['median']:.1f} ({min(r['rounds']):.1f}-{max(r['rounds']):.1f})"
                         for figure, r in figures.items())  # fmt: skip
        print(f"{name}: {line}")
    if args.out:
        args.out.write_text(json.dumps({"bundle": str(args.bundle), "variants": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
