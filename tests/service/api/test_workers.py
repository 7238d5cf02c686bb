"""`serve` with several workers (MT_WORKERS): one port, every worker drains on SIGTERM and nothing is
dropped, metrics add up whichever worker answers, and a worker that fails takes the service down
with its exit code. Real processes throughout; waits are on log lines and exits, with generous bounds."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

from service.api.app import LOAD_FAILURE_EXIT_CODE
from tests.conftest import FIGURES
from tests.service.api.test_failures import (
    EXIT_TIMEOUT_S,
    copy_bundle,
    json_lines,
    manifest_not_utf8,
    serve_until_exit,
)
from tests.service.api.test_overload_shutdown import BODY, _get_status, post
from tests.support.server import RunningServer

WORKERS = {"MT_WORKERS": "2", "MT_DRAIN_SETTLE_S": "3", "MT_MAX_QUEUE": "1024"}


def _until_all_ready(server: RunningServer, workers: int, timeout: float = 120) -> None:
    """Every worker loaded (RunningServer waits for the first /readyz 200, from any of them)."""
    deadline = time.monotonic() + timeout
    while sum(x.get("event") == "ready" for x in json_lines(server.output())) < workers:
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.1)


def _translations_counted(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    line = next(x for x in text.splitlines() if x.startswith('translator_requests_total{route="/v1/translate"'))
    return int(float(line.rsplit(" ", 1)[1]))


def test_two_workers_add_up_their_metrics_and_drain_every_request(bundle_dir: Path) -> None:
    server = RunningServer(bundle_dir, env=WORKERS)
    _until_all_ready(server, 2)
    for _ in range(8):
        assert post(server.port, BODY)[0] == 200
    work = {**BODY, "q": ["Tom chases Jerry again today and Mary likes Bob."] * 6, "attention": {"format": "none"}}
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(post(server.port, work)[0])) for _ in range(16)]
    for t in threads:
        t.start()
    counted = [_translations_counted(server.port) for _ in range(4)]  # each scrape: whichever worker
    time.sleep(0.3)
    server.proc.send_signal(signal.SIGTERM)
    ready = next((s for s in iter(lambda: _get_status(f"{server.url}/readyz"), None) if s == 503), None)
    late = post(server.port, BODY)[0]  # inside the settle window: still served
    for t in threads:
        t.join()
    code = server.proc.wait(timeout=60)
    lines = json_lines(server.stop())
    served = Counter(x["pid"] for x in lines if x.get("route") == "/v1/translate")
    FIGURES["two workers"] = f"requests served per worker {sorted(served.values())}; exit {code}"
    assert all(8 <= c <= 8 + 16 for c in counted) and counted == sorted(counted), counted
    assert results == [200] * 16 and late == 200 and ready == 503 and code == 0
    assert sum(served.values()) == 8 + 16 + 1 and len({x["pid"] for x in lines if x.get("event") == "ready"}) == 2


def test_a_worker_that_cannot_load_stops_the_service_with_its_exit_code(bundle_dir: Path, tmp_path: Path) -> None:
    root = copy_bundle(bundle_dir, tmp_path)
    manifest_not_utf8(root / "en-zh")
    code, output = serve_until_exit(root, tmp_path / "serve.log", [], "--workers", "2")
    lines = json_lines(output)
    assert code == LOAD_FAILURE_EXIT_CODE, lines
    assert any(x.get("event") == "load_failed" and x.get("error_type") == "UnicodeDecodeError" for x in lines)
    assert any(x.get("event") == "worker_ended" for x in lines)


AGGREGATE = """
import sys
from service.api.metrics import Metrics
m = Metrics.create()
assert m.shared
for _ in range(int(sys.argv[1])):
    m.requests.labels("/v1/translate", "200").inc()
m.depth = lambda: int(sys.argv[1])
m.after_request()
print(m.exposition().decode())
"""


def test_metrics_in_shared_mode_add_up_every_process(tmp_path: Path) -> None:
    """Two processes count 3 and 4 requests into one directory; each one's exposition shows 7 (the
    queue depth sums each process's own latest value, until the supervisor marks one dead)."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    outputs = []
    for n in (3, 4):
        run = subprocess.run(
            [sys.executable, "-c", AGGREGATE, str(n)], env=env, capture_output=True, text=True, check=False
        )
        assert run.returncode == 0, run.stderr
        outputs.append(run.stdout)
    assert 'translator_requests_total{route="/v1/translate",status="200"} 7.0' in outputs[1]
    assert "translator_queue_depth 7.0" in outputs[1]  # nobody marked the first process dead: its 3 counts


def test_workers_on_a_port_another_program_holds_exit_1_saying_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        script = Path(sys.executable).parent / "attention-mt"
        run = subprocess.run(
            [str(script), "serve", "--port", str(port), "--workers", "2", "--bundles", str(tmp_path)],
            capture_output=True, text=True, timeout=EXIT_TIMEOUT_S, check=False,
        )  # fmt: skip
    lines = json_lines(run.stdout + run.stderr)
    assert run.returncode == 1, lines
    assert any(x.get("event") == "bind_failed" and f"127.0.0.1:{port}" in str(x["message"]) for x in lines)
