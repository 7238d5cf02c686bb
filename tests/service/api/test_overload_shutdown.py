"""Overload and graceful shutdown against a real `attention-mt serve` (issue 8, items 3 and 5)."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import FIGURES
from tests.support.server import RunningServer

BODY = {"q": "Tom chases Jerry today.", "source": "en", "target": "zh", "beam_size": 4}


def post(url_port: int, body: dict, timeout: float = 60) -> tuple[int, dict[str, str], dict]:
    conn = http.client.HTTPConnection("127.0.0.1", url_port, timeout=timeout)
    conn.request("POST", "/v1/translate", body=json.dumps(body), headers={"content-type": "application/json"})
    response = conn.getresponse()
    data = json.loads(response.read())
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def test_overload_answers_200_or_503_and_recovers(bundle_dir: Path) -> None:
    server = RunningServer(bundle_dir, env={"MT_MAX_QUEUE": "8", "MT_MAX_BATCH_SIZE": "4"})
    statuses: list[int] = []
    problems: list[str] = []
    stop = time.monotonic() + 20
    lock = threading.Lock()

    def client() -> None:
        while time.monotonic() < stop:
            try:
                status, headers, data = post(server.port, BODY)
            except OSError as exc:
                problems.append(f"connection error: {exc}")
                continue
            with lock:
                statuses.append(status)
            if status == 503 and (headers.get("retry-after") is None or data["error"]["code"] != "overloaded"):
                problems.append(f"503 without Retry-After or error body: {headers} {data}")
            elif status not in (200, 503):
                problems.append(f"status {status}: {data}")

    try:
        threads = [threading.Thread(target=client) for _ in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = time.monotonic()
        with urllib.request.urlopen(f"{server.url}/readyz", timeout=5) as r:
            assert r.status == 200
        status, _, _ = post(server.port, BODY, timeout=2)
        recovered = time.monotonic() - after
    finally:
        server.stop()
    share = statuses.count(503) / max(len(statuses), 1)
    FIGURES["overload (64 clients, queue 8, 20 s)"] = (
        f"{len(statuses)} answers, {statuses.count(200)} x 200, {statuses.count(503)} x 503 ({share:.0%}), "
        f"recovered in {recovered:.2f} s"
    )
    assert not problems, problems[:5]
    assert status == 200 and recovered < 2.0
    assert statuses.count(200) > 0 and statuses.count(503) > 0  # it was really overloaded, and still served


ROUNDS = 10


def _get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _drain_round(bundle_dir: Path) -> tuple[list[int], int, int, int | None, float]:
    """16 concurrent requests, SIGTERM 0.3 s later, one more request inside the settle window."""
    env = {"MT_INTRA_OP_THREADS": "1", "MT_BATCHING": "false", "MT_MAX_QUEUE": "1024", "MT_DRAIN_SETTLE_S": "3"}
    server = RunningServer(bundle_dir, env=env)
    work = {**BODY, "q": ["Tom chases Jerry again today and Mary likes Bob."] * 6, "attention": {"format": "none"}}
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(post(server.port, work)[0])) for _ in range(16)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    ready = next((s for s in iter(lambda: _get_status(f"{server.url}/readyz"), None) if s == 503), None)  # at once
    late = post(server.port, BODY)[0]  # sent inside the settle window: still served
    for t in threads:
        t.join()
    code = server.proc.wait(timeout=60)  # on its own: the window, then the drain, then exit
    seconds = time.monotonic() - started
    server.stop()
    return results, ready or 0, late, code, seconds


def test_sigterm_drains_every_request(bundle_dir: Path) -> None:
    """The drain drops nothing: every request sent before SIGTERM, and during the settle window after
    it, gets 200; /readyz turns 503 at once; the process exits 0 (10 rounds, each a fresh server)."""
    outcomes = [_drain_round(bundle_dir) for _ in range(ROUNDS)]
    answered = sum(r.count(200) for r, *_ in outcomes)
    FIGURES["SIGTERM drain, 10 rounds of 16 + 1"] = (
        f"{answered}/{16 * ROUNDS} before SIGTERM and {sum(o[2] == 200 for o in outcomes)}/{ROUNDS} during the "
        f"settle window answered 200; exits {sorted({o[3] for o in outcomes})}; "
        f"SIGTERM to exit {min(o[4] for o in outcomes):.1f}-{max(o[4] for o in outcomes):.1f} s"
    )
    for results, ready, late, code, seconds in outcomes:
        assert results == [200] * 16 and late == 200
        assert ready == 503 and code == 0 and 3.0 <= seconds < 25  # the 3 s window was kept
