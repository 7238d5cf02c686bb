"""Soak (issue 8, item 7): thousands of requests of every source length; resident memory after
the first 500 may grow by at most 10%. Run with the arena settings the service ships with; the
alternatives are measured for the record."""

from __future__ import annotations

import http.client
import json
import random
import threading
from pathlib import Path

from service.engine.bundle import load_bundle
from service.engine.tokenizer import Tokenizer
from tests.conftest import FIGURES
from tests.support.server import RunningServer
from tests.support.synthetic import NAMES, TIMES, VERBS

CONCURRENCY = 4


def sources(bundle: Path, count: int, seed: int = 0) -> list[str]:
    """Texts whose token counts are spread uniformly from 1 to the model's source limit."""
    manifest = load_bundle(bundle).manifest
    tokenizer = Tokenizer.from_file(bundle / manifest.tokenizers.source)
    limit = manifest.limits.max_source_tokens - 1  # room for the end-of-sentence token
    words = [*NAMES, *VERBS, *(t.strip() for t in TIMES if t.strip())]
    rng = random.Random(seed)
    texts = []
    while len(texts) < count:
        target = rng.randint(1, limit)
        text = ""
        while True:
            longer = f"{text} {rng.choice(words)}".strip()
            if len(tokenizer.encode(longer).ids) > target:
                break
            text = longer
        texts.append(text or rng.choice(words))
    return texts


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def soak(bundle_dir: Path, texts: list[str], env: dict[str, str]) -> tuple[list[int], list[int]]:
    """Send every text (concurrency 4); sample RSS every 250 requests; return (RSS curve, statuses)."""
    server = RunningServer(bundle_dir, env=env)
    curve, statuses = [rss_kb(server.proc.pid)], []
    lock = threading.Lock()
    position = iter(range(len(texts)))

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        for i in position:
            body = json.dumps({"q": texts[i], "source": "en", "target": "zh", "beam_size": 2})
            conn.request("POST", "/v1/translate", body=body, headers={"content-type": "application/json"})
            response = conn.getresponse()
            response.read()
            with lock:
                statuses.append(response.status)
                if len(statuses) % 250 == 0:
                    curve.append(rss_kb(server.proc.pid))

    try:
        threads = [threading.Thread(target=client) for _ in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
    return curve, statuses


def growth_after_500(curve: list[int]) -> float:
    return curve[-1] / curve[2] - 1  # curve[2] is the sample after 500 requests


def test_soak_memory_stays_flat(bundle_dir: Path) -> None:
    texts = sources(bundle_dir / "en-zh", 5000)
    curve, statuses = soak(bundle_dir, texts, env={})  # the shipped settings: arena and memory pattern on
    growth = growth_after_500(curve)
    FIGURES["soak 5000 (shipped: arena on, mem pattern on)"] = (
        f"RSS MB every 250 requests: {[round(c / 1024) for c in curve]}; after the first 500: {growth:+.1%}"
    )
    assert statuses.count(200) == len(texts), {s: statuses.count(s) for s in set(statuses)}
    assert growth <= 0.10


def test_soak_alternatives_for_the_record(bundle_dir: Path) -> None:
    texts = sources(bundle_dir / "en-zh", 1500, seed=1)
    for name, env in {
        "arena off": {"MT_ENABLE_MEM_ARENA": "false"},
        "mem pattern off": {"MT_ENABLE_MEM_PATTERN": "false"},
    }.items():
        curve, statuses = soak(bundle_dir, texts, env=env)
        FIGURES[f"soak 1500 ({name})"] = (
            f"RSS MB: {[round(c / 1024) for c in curve]}; after the first 500: {growth_after_500(curve):+.1%}"
        )
        assert statuses.count(200) == len(texts)
