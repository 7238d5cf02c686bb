"""Overload and graceful shutdown against a real `attention-mt serve` (issue 8, items 3 and 5)."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
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


def test_sigterm_drains_in_flight_requests(bundle_dir: Path) -> None:
    server = RunningServer(bundle_dir, env={"MT_INTRA_OP_THREADS": "1", "MT_BATCHING": "false", "MT_MAX_QUEUE": "1024"})
    text = "Tom chases Jerry again today. Mary likes Bob and John sees Alice."
    slow = {
        "q": [text] * 32,  # about 0.1 s each on one thread: 16 of them queue up
        "source": "en",
        "target": "zh",
        "beam_size": 8,
        "n_best": 8,
        "attention": {"format": "none"},
    }
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(post(server.port, slow)[0])) for _ in range(16)]
    for t in threads:
        t.start()
    time.sleep(0.1)  # the 16 are sent; one inference thread works through them in turn
    started = time.monotonic()
    in_flight = 16 - len(results)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        urllib.request.urlopen(f"{server.url}/livez", timeout=2)
        refused = False
    except OSError:
        refused = True
    for t in threads:
        t.join()
    output = server.stop()
    seconds = time.monotonic() - started
    FIGURES["SIGTERM with 16 sent"] = (
        f"{in_flight} in flight at SIGTERM; {results.count(200)}/16 completed with 200; exited after {seconds:.1f} s"
    )
    assert in_flight >= 14, "the requests must still be running when SIGTERM arrives"
    assert results == [200] * 16, output[-2000:]
    assert refused, "new connections must be refused while draining"
    assert seconds < 20 and "Application shutdown complete" in output
