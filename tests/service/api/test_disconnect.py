"""A client that disconnects mid-request has its sentences dropped from the scheduler's batches.

A real server with the shipped en-zh bundle gets a request that takes many seconds to decode; the
client closes its socket after sending it. The server must drop the rows (its log says so), its
queue must empty, and it must go on serving. The wait is on the server's log line, not a sleep."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest

from service.settings import DEFAULT_BUNDLES
from tests.support.server import RunningServer

pytestmark = pytest.mark.skipif(not (DEFAULT_BUNDLES / "en-zh").is_dir(), reason="no shipped en-zh bundle")

PARAGRAPH = " ".join(
    [
        "The committee, which had been meeting every week since the spring, finally published its report.",
        "It recommended that the old bridge be closed to traffic and that a new one be built further north.",
        "Many residents were unhappy, because the detour would add half an hour to their daily journeys.",
        "The mayor promised to hold a public hearing before any decision was taken.",
        "Nobody knew how long the construction would take, or how much it would cost in the end.",
    ]
)


def send_and_leave(port: int, body: bytes, after: float) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        head = "POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        s.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(after)  # the server is decoding now; then the client goes away


def log_events(server: RunningServer) -> list[dict]:
    lines = [line for line in server.output().splitlines() if line.startswith("{")]
    return [json.loads(line) for line in lines]


def test_a_client_that_leaves_has_its_rows_dropped_and_the_server_goes_on() -> None:
    server = RunningServer(DEFAULT_BUNDLES, env={"MT_BUNDLES": str(DEFAULT_BUNDLES)})
    try:
        body = {"q": [PARAGRAPH] * 32, "model": "en-zh", "beam_size": 4, "attention": {"format": "none"}}
        send_and_leave(server.port, json.dumps(body).encode(), after=1.0)
        deadline = time.monotonic() + 120
        while not any(e.get("event") == "rows_dropped" for e in log_events(server)):
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.1)
        while True:  # the rest of that request's sentences leave before their next step
            with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as r:
                depth = next(ln for ln in r.read().decode().splitlines() if ln.startswith("translator_queue_depth"))
            if float(depth.split()[-1]) == 0:
                break
            assert time.monotonic() < deadline, depth
            time.sleep(0.1)
        request = urllib.request.Request(
            f"{server.url}/v1/translate",
            data=json.dumps({"q": "Tom chases Jerry.", "model": "en-zh"}).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            assert r.status == 200 and json.loads(r.read())["translations"][0]["text"]
    finally:
        output = server.stop()
    statuses = [e.get("status") for e in (json.loads(ln) for ln in output.splitlines() if ln.startswith("{"))]
    assert 499 in statuses  # the access log records the request that was left
