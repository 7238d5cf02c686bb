"""Latency and throughput of the service: the engine alone, and through HTTP, side by side.

    python -m benchmarks.http_bench --bundle bundles/en-zh [--seconds 10] [--out results.json]

1. engine alone, batch 1: the service core in-process (tokenize, search, shape), sequentially,
   against the same sentences through a real `attention-mt serve`, one client: the HTTP overhead;
2. the engine's offline throughput (length-sorted batches of 32, no server): the ceiling, against
   32 concurrent clients (greedy);
3. throughput with 1 and 16 concurrent clients (greedy), and 1 and 16 at beam 4;
4. a short sentence's latency alone, and while 32 clients keep the server busy (p50, p99);
5. where the server's CPU goes under 32 clients: milliseconds of CPU a request in its event loop
   (the main thread) and in its other threads (the inference thread, above all), from /proc.

1 is also taken request by request (engine, then HTTP, for each text), with the server's own
log giving each request's time inside the app: that splits the overhead into socket + uvicorn
and the app around the engine.

1 and 2 are the ratios whose parts a shared machine moves most between minutes, so they are
taken in `--rounds` interleaved rounds (engine, HTTP, offline, 32 clients, then again), and the
ratio reported is the median of the rounds' ratios, with its range.

The load generator is asyncio over raw keep-alive sockets, one process, so it leaves the server
most of the 2 cores; its CPU time is printed next to each figure. Clients and server share the
machine: the ratios within one run are what count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.api.app import build_service, session_config
from service.engine.catalog import Catalog
from service.engine.requests import AttentionOptions, TranslateRequest
from service.settings import Settings

SHORT = {"en": "Thank you.", "zh": "谢谢。"}
HEAD = b"POST /v1/translate HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


FALLBACK_TEXTS = ("Tom chases Jerry.", "Mary likes John today.", "I am full.", "Where is the station?")


LONG_FALLBACK = {
    "en": (
        "The government said on Tuesday that the new law would take effect next year after months of debate.",
        "Doctors at the city hospital treated more than three hundred patients for the virus last week.",
    ),
    "zh": (
        "政府周二表示，经过数月的辩论，新法律将于明年生效。",
        "上周，市医院的医生为三百多名感染病毒的患者进行了治疗。",
    ),
}


@dataclass(frozen=True)
class Texts:
    """The sentences a run sends, and where they come from (results record it)."""

    source: str
    texts: list[str]


def sentences(source_lang: str, n: int) -> Texts:
    """n sentences of the Tatoeba test split, repeated as needed; four fixed ones when the corpus or
    the training extras are missing. The fallback is said on stderr and in `source`: the corpus is
    found beside the checkout or the working directory (or $ATTENTION_MT_CORPUS), so two code trees
    compared side by side can silently run different sentences otherwise (one such comparison,
    docs/benchmarks.md, measured 0.87x for a change that measured 0.98x on the same sentences)."""

    def read() -> tuple[list[str], str]:
        from models.data import default_corpus_path, read_corpus, split_corpus  # noqa: PLC0415 (training extras)

        path = default_corpus_path()
        texts = [p.text(source_lang) for p in split_corpus(read_corpus(path))["test"]]
        return texts, f"the Tatoeba test split of {path}"

    return _chosen(read, FALLBACK_TEXTS, n)


def long_sentences(source_lang: str, n: int) -> Texts:
    """n sentences of real text (news and health, 20-250 characters) from the real-text test split,
    or two fixed ones: the load that short texts can go first beside."""

    def read() -> tuple[list[str], str]:
        from models.data import default_real_text_path, read_corpus, split_real_text  # noqa: PLC0415

        path = default_real_text_path()
        texts = [p.text(source_lang) for p in split_real_text(read_corpus(path))["test"]]
        return [t for t in texts if 20 <= len(t) <= 250], f"the real-text test split of {path}, 20-250 characters"

    return _chosen(read, LONG_FALLBACK[source_lang], n)


def _chosen(read: Callable[[], tuple[list[str], str]], fallback: Sequence[str], n: int) -> Texts:
    """n texts from `read` (texts, where from), repeated as needed; `fallback`, said on stderr, when
    it fails or finds none."""
    try:
        texts, source = read()
        if not texts:
            raise ValueError(f"no sentences in {source}")
    except Exception as exc:  # no corpus or no training extras: a fixed set
        texts, source = list(fallback), f"{len(fallback)} fixed sentences ({exc})"
        print(f"http_bench: sending {source}", file=sys.stderr)
    return Texts(source, (texts * (n // len(texts) + 1))[:n])


class Engine:
    """The service core in-process (no HTTP) and the bare translator, built once for every round."""

    def __init__(self, bundle: Path) -> None:
        from service.engine.bundle import load_bundle  # noqa: PLC0415
        from service.engine.translator import Translator  # noqa: PLC0415

        settings = Settings(bundles=bundle.parent, max_queue_delay_ms=0)
        self.service = build_service(Catalog.load(settings.bundles, session_config(settings)), settings)
        self.translator = Translator(load_bundle(bundle), session_config(settings))
        self.name = bundle.name

    async def latencies(self, texts: list[str], beam: int) -> list[float]:
        times = []
        for text in texts:
            start = time.perf_counter()
            request = TranslateRequest([text], model=self.name, beam_size=beam, attention=AttentionOptions())
            await self.service.translate(request)
            times.append(time.perf_counter() - start)
        return times

    def offline_throughput(self, texts: list[str], beam: int) -> float:
        """Sentences per second in length-sorted batches of 32: the ceiling for HTTP."""
        options = self.translator.options(beam_size=beam)
        start = time.perf_counter()
        self.translator.translate_texts(texts, options, batch_size=32)
        return len(texts) / (time.perf_counter() - start)


class Server:
    def __init__(
        self, bundle: Path, log: Path | None = None, env: dict[str, str] | None = None, log_pipe: bool = False
    ) -> None:
        """`log`: where the server's JSON log lines go (one per request, with its duration); `env`:
        settings of this server's own (MT_* variables); `log_pipe` (without `log`): the lines go into
        a pipe that another process reads and drops, as a container runtime reads a container's
        stderr (a write into a pipe costs the server more than one into /dev/null or a file)."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "MT_MAX_QUEUE": "4096", "MT_BUNDLES": str(bundle.parent), **(env or {})}
        script = Path(sys.executable).parent / "attention-mt"
        workers = int(env.get("MT_WORKERS", "1"))
        if workers > 1 and log is None:  # readiness is per worker: their log lines say when all are
            log = Path(tempfile.mkstemp(prefix="bench-serve-", suffix=".log")[1])
        self.log = log
        self.reader: subprocess.Popen[bytes] | None = None
        with open(log or os.devnull, "wb") as sink:  # the child keeps its own copy of the handle
            stderr = subprocess.PIPE if log_pipe and log is None else sink
            self.proc = subprocess.Popen(
                [str(script), "serve", "--port", str(self.port)], env=env, stdout=subprocess.DEVNULL, stderr=stderr
            )
        if self.proc.stderr is not None:
            self.reader = subprocess.Popen(["cat"], stdin=self.proc.stderr, stdout=subprocess.DEVNULL)
            self.proc.stderr.close()  # the reader holds the pipe now
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200 and self._ready_workers() >= workers:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become ready")

    def _ready_workers(self) -> int:
        if self.log is None:
            return 1
        return self.log.read_text(encoding="utf-8", errors="replace").count('"event": "ready"')

    def pids(self) -> list[int]:
        """The server's processes: `serve` and, under MT_WORKERS > 1, its workers."""
        return [self.proc.pid, *children(self.proc.pid)]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        if self.reader is not None:
            self.reader.wait(timeout=60)  # the pipe closed with the server


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc; none elsewhere)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def thread_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds so far of the processes' main threads (uvicorn's event loop) and of all their
    other threads (the inference thread, onnxruntime's, the log's timer); empty where /proc is not.
    A thread that ends between two readings takes its time with them: the server's threads live as
    long as it does."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out = {"event_loop": 0.0, "other_threads": 0.0}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return {}
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            seconds = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
            out["event_loop" if tid == str(pid) else "other_threads"] += seconds
    return out


async def server_cpu_per_request(server: Server, bodies: list[bytes], clients: int, seconds: float) -> dict[str, Any]:
    """Where the server's CPU goes under load: milliseconds a request in its event loops and in its
    other threads, with the requests a second and the client's own CPU seconds."""
    pids = server.pids()
    before, cpu = thread_cpu(pids), time.process_time()
    times = await closed_loop(server.port, bodies, clients, seconds)
    after, client = thread_cpu(pids), time.process_time() - cpu
    ms = {k: (after[k] - before[k]) * 1000 / max(1, len(times)) for k in after if k in before}
    return {"clients": clients, "rps": len(times) / seconds, "client_cpu_s": client, "server_cpu_ms_per_request": ms}


class Client:
    """One keep-alive HTTP/1.1 connection speaking just enough of the protocol, with no parsing cost."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, body: bytes, request_id: str = "") -> float:
        """Send a translation request; its latency in seconds."""
        head = HEAD % len(body)
        if request_id:  # the server logs it with its own duration
            head = head[:-2] + b"X-Request-Id: " + request_id.encode() + b"\r\n\r\n"
        start = time.perf_counter()
        self.writer.write(head + body)
        status_and_headers = await self.reader.readuntil(b"\r\n\r\n")
        if not status_and_headers.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(status_and_headers.split(b"\r\n")[0].decode())
        length = next(
            int(line.split(b":")[1])
            for line in status_and_headers.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await self.reader.readexactly(length)
        return time.perf_counter() - start

    def close(self) -> None:
        self.writer.close()


def body_of(text: str, model: str, beam: int) -> bytes:
    return json.dumps({"q": text, "model": model, "beam_size": beam}).encode()


async def sequential(port: int, bodies: list[bytes]) -> list[float]:
    client = await Client.connect(port)
    try:
        return [await client.post(b) for b in bodies]
    finally:
        client.close()


async def closed_loop(port: int, bodies: list[bytes], clients: int, seconds: float) -> list[float]:
    """Each request's latency, with `clients` connections sending back to back for `seconds`."""
    stop, times = time.monotonic() + seconds, []

    async def one(i: int) -> None:
        client = await Client.connect(port)
        k = i
        while time.monotonic() < stop:
            times.append(await client.post(bodies[k % len(bodies)]))
            k += clients
        client.close()

    await asyncio.gather(*(one(i) for i in range(clients)))
    return times


async def load(port: int, bodies: list[bytes], clients: int, seconds: float) -> tuple[float, float]:
    """Sentences per second with `clients` connections sending back to back; the client's CPU seconds."""
    cpu, start = time.process_time(), time.monotonic()
    done = len(await closed_loop(port, bodies, clients, seconds))
    return done / (time.monotonic() - start), time.process_time() - cpu


async def probe_under_load(port: int, probe: bytes, bodies: list[bytes], clients: int, seconds: float) -> list[float]:
    """The probe's latencies, sent one after another while `clients` others keep the server busy."""
    return (await probe_beside(port, probe, bodies, clients, seconds))[0]


async def probe_beside(
    port: int, probe: bytes, bodies: list[bytes], clients: int, seconds: float, every_s: float = 0.0
) -> tuple[list[float], float]:
    """The probe's latencies, one request every `every_s` (0: back to back) while `clients` others
    keep the server busy with `bodies`; and those clients' requests a second."""
    loading = asyncio.ensure_future(load(port, bodies, clients, seconds))
    await asyncio.sleep(1.0)  # let the load reach its steady state
    client = await Client.connect(port)
    times: list[float] = []
    while not loading.done() or not times:  # one probe at least, however late the load's end
        times.append(await client.post(probe))
        await asyncio.sleep(every_s)
    client.close()
    return times, (await loading)[0]


async def paired_split(server: Server, engine: Engine, texts: list[str], repeats: int) -> dict[str, Any]:
    """Batch 1, request by request: the engine in-process, then the same text over HTTP, so drift
    between minutes cancels out. The server's log gives each request's time inside the app (from
    the outermost middleware in to the last byte handed to uvicorn), which splits the HTTP path
    into socket + uvicorn (client latency - app time) and the app around the engine (app - engine).
    """
    assert server.log is not None
    client = await Client.connect(server.port)
    pairs: list[tuple[str, float, float]] = []
    try:
        for i in range(repeats):
            for j, text in enumerate(texts):
                [engine_s] = await engine.latencies([text], 1)
                request_id = f"pair{i:03d}x{j:04d}"
                pairs.append((request_id, engine_s, await client.post(body_of(text, engine.name, 1), request_id)))
    finally:
        client.close()
    app_ms = await _durations(server.log, {rid for rid, _, _ in pairs})
    rows = [(e * 1000, app_ms[rid], h * 1000) for rid, e, h in pairs if rid in app_ms]
    med = statistics.median
    return {
        "requests": len(rows),
        "engine_ms": med(e for e, _, _ in rows),
        "app_ms": med(a for _, a, _ in rows),
        "http_ms": med(h for _, _, h in rows),
        "overhead_per_pair": med(h / e - 1 for e, _, h in rows),
        "app_minus_engine_ms": med(a - e for e, a, _ in rows),
        "socket_and_uvicorn_ms": med(h - a for _, a, h in rows),
    }


async def _durations(log: Path, ids: set[str], wait_s: float = 5.0) -> dict[str, float]:
    """request id -> duration_ms, from the server's JSON log lines. The server writes a request's
    line after its answer, so the last lines may still be on their way: wait for them a little."""
    deadline = time.monotonic() + wait_s
    while True:
        out = {}
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("event") == "request" and "duration_ms" in record:
                out[str(record.get("request_id"))] = float(record["duration_ms"])
        if ids <= out.keys() or time.monotonic() > deadline:
            return out
        await asyncio.sleep(0.05)


def pct(times: list[float], q: float) -> float:
    return sorted(times)[min(len(times) - 1, int(q * len(times)))] * 1000


async def interleaved(port: int, engine: Engine, texts: list[str], seconds: float, rounds: int) -> dict[str, Any]:
    """The engine against HTTP at batch 1, and offline against 32 clients, round after round."""
    greedy = [body_of(t, engine.name, 1) for t in texts]
    await sequential(port, greedy[:10])  # warm-up, both sides
    await engine.latencies(texts[:10], 1)
    engine.offline_throughput(texts[:32], 1)
    runs: dict[str, list[float]] = {"engine_ms": [], "http_ms": [], "offline_rps": [], "rps_32": []}
    for _ in range(rounds):
        runs["engine_ms"].append(statistics.median(await engine.latencies(texts[:40], 1)) * 1000)
        runs["http_ms"].append(statistics.median(await sequential(port, greedy[:40])) * 1000)
        runs["offline_rps"].append(engine.offline_throughput(texts, 1))
        runs["rps_32"].append((await load(port, greedy, 32, seconds / 2))[0])
    return runs


async def over_http(server: Server, texts: list[str], model: str, short: str, seconds: float) -> dict[str, Any]:
    port = server.port
    out: dict[str, Any] = {}
    greedy = [body_of(t, model, 1) for t in texts]
    beam4 = [body_of(t, model, 4) for t in texts]
    for clients in (1, 16, 32):
        out[f"rps_{clients}"], out[f"client_cpu_s_{clients}"] = await load(port, greedy, clients, seconds)
    for clients in (1, 16):
        out[f"rps_{clients}_beam4"], out[f"client_cpu_s_{clients}_beam4"] = await load(port, beam4, clients, seconds)
    probe = body_of(short, model, 1)
    alone = await sequential(port, [probe] * 50)
    busy = await probe_under_load(port, probe, greedy, 32, seconds)
    out |= {"short_p50_alone_ms": pct(alone, 0.5), "short_p50_loaded_ms": pct(busy, 0.5)}
    out |= {"short_p99_loaded_ms": pct(busy, 0.99), "short_probes_loaded": len(busy)}
    out["cpu_split_32"] = await server_cpu_per_request(server, greedy, 32, seconds)
    return out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def measure(server: Server, args: argparse.Namespace, texts: list[str], short: str) -> dict[str, Any]:
    engine = Engine(args.bundle)
    engine.service.scheduler.start()
    try:
        runs = await interleaved(server.port, engine, texts, args.seconds, args.rounds)
        split = await paired_split(server, engine, texts[:40], args.rounds)
    finally:
        await engine.service.scheduler.stop()
    r: dict[str, Any] = {"rounds": runs, "batch1_paired": split}
    overhead = [h / e - 1 for h, e in zip(runs["http_ms"], runs["engine_ms"], strict=True)]
    ceiling = [c / o for c, o in zip(runs["rps_32"], runs["offline_rps"], strict=True)]
    r |= await over_http(server, texts, engine.name, short, args.seconds)
    r["targets"] = {
        "http_overhead (<= 0.15)": spread(overhead),
        "http_overhead, request by request (<= 0.15)": split["overhead_per_pair"],
        "32 clients / offline batch 32 (>= 0.7)": spread(ceiling),
        "16 clients / 1 client, beam 4 (>= 3)": r["rps_16_beam4"] / r["rps_1_beam4"],
        "short p99 loaded / p50 alone (<= 3)": r["short_p99_loaded_ms"] / r["short_p50_alone_ms"],
    }
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the two ratios")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    chosen = sentences(manifest["source_lang"], args.sentences)
    texts = chosen.texts
    r: dict[str, Any] = {"bundle": str(args.bundle), "sentences": len(texts), "texts": chosen.source}
    r["seconds"] = args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(args.bundle, log=Path(tmp) / "server.log")
        try:
            r |= asyncio.run(measure(server, args, texts, SHORT[manifest["source_lang"]]))
        finally:
            server.stop()
    print(json.dumps(r, indent=2))
    if args.out:
        args.out.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
