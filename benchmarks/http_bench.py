"""Latency and throughput of the service: the engine alone, and through HTTP.

    python -m benchmarks.http_bench --bundle bundles/en-zh [--seconds 15] [--out results.json]

1. engine alone, batch 1: the service core in-process (tokenize, search, shape), sequentially;
2. HTTP, batch 1: the same sentences through a real `attention-mt serve`, sequentially;
3. throughput with 1, 16, 32 and 64 concurrent clients, dynamic batching on and off, as a ratio
   to the engine's offline throughput (length-sorted batches of 32, no server).
Clients and server share this machine, so the ratios within one run are what count.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from service.api.app import session_config
from service.engine.catalog import Catalog
from service.engine.requests import AttentionOptions, TranslateRequest
from service.engine.service import TranslationService
from service.settings import Settings


def sentences(source_lang: str, n: int) -> list[str]:
    try:
        from models.data import read_corpus, split_corpus  # noqa: PLC0415 (needs the training extras)

        pairs = split_corpus(read_corpus())["test"]
        texts = [p.text(source_lang) for p in pairs]
    except Exception:  # no corpus or no training extras: a fixed set
        texts = ["Tom chases Jerry.", "Mary likes John today.", "I am full.", "Where is the station?"]
    return (texts * (n // len(texts) + 1))[:n]


def engine_latency(bundle: Path, texts: list[str], beam: int) -> list[float]:
    settings = Settings(bundles=bundle.parent, max_queue_delay_ms=0)
    service = TranslationService(Catalog.load(settings.bundles, session_config(settings)), settings)
    name = bundle.name

    async def run() -> list[float]:
        service.batcher.start()
        times = []
        for text in texts:
            start = time.perf_counter()
            await service.translate(TranslateRequest([text], model=name, beam_size=beam, attention=AttentionOptions()))
            times.append(time.perf_counter() - start)
        await service.batcher.stop()
        return times

    return asyncio.run(run())


def offline_throughput(bundle: Path, texts: list[str], beam: int) -> float:
    """Sentences per second of the engine alone, in length-sorted batches of 32: the ceiling for HTTP."""
    from service.engine.bundle import load_bundle  # noqa: PLC0415
    from service.engine.translator import SearchOptions, Translator  # noqa: PLC0415

    settings = Settings(bundles=bundle.parent)
    translator = Translator(load_bundle(bundle), session_config(settings))
    translator.translate_texts(texts[:32], SearchOptions(beam_size=beam))  # warm-up
    start = time.perf_counter()
    translator.translate_texts(texts, SearchOptions(beam_size=beam), batch_size=32)
    return len(texts) / (time.perf_counter() - start)


class Server:
    def __init__(self, bundle: Path, batching: bool) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {
            **os.environ,
            "MT_BATCHING": str(batching).lower(),
            "MT_MAX_QUEUE": "4096",
            "MT_BUNDLES": str(bundle.parent),
        }
        script = Path(sys.executable).parent / "attention-mt"
        self.proc = subprocess.Popen(
            [str(script), "serve", "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("server did not become ready")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def post(conn: http.client.HTTPConnection, body: bytes) -> None:
    conn.request("POST", "/v1/translate", body=body, headers={"content-type": "application/json"})
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}")


def body_of(text: str, model: str, beam: int) -> bytes:
    return json.dumps({"q": text, "model": model, "beam_size": beam}).encode()


def http_latency(port: int, texts: list[str], model: str, beam: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    for text in texts:
        start = time.perf_counter()
        post(conn, body_of(text, model, beam))
        times.append(time.perf_counter() - start)
    return times


def throughput(port: int, texts: list[str], model: str, beam: int, clients: int, seconds: float) -> float:
    """Sentences per second with `clients` keep-alive connections sending back to back."""
    done = [0] * clients
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        k = i
        while time.monotonic() < stop:
            post(conn, body_of(texts[k % len(texts)], model, beam))
            done[i] += 1
            k += clients

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    texts = sentences(manifest["source_lang"], args.sentences)
    model = manifest["name"]
    results: dict[str, Any] = {"bundle": str(args.bundle), "beam": args.beam, "sentences": len(texts)}
    engine = engine_latency(args.bundle, texts, args.beam)
    results["engine_ms_median"] = statistics.median(engine) * 1000
    results["offline_rps_batch32"] = offline_throughput(args.bundle, texts, args.beam)
    for batching in (True, False):
        server = Server(args.bundle, batching)
        try:
            key = "on" if batching else "off"
            if batching:
                http = http_latency(server.port, texts, model, args.beam)
                results["http_ms_median"] = statistics.median(http) * 1000
            for clients in (1, 16, 32, 64):
                rps = throughput(server.port, texts, model, args.beam, clients, args.seconds)
                results[f"rps_{clients}_batching_{key}"] = rps
                results[f"ratio_{clients}_batching_{key}"] = rps / results["offline_rps_batch32"]
        finally:
            server.stop()
    results["http_overhead"] = results["http_ms_median"] / results["engine_ms_median"] - 1
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
