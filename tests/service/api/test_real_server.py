"""`attention-mt serve` as a real uvicorn process on 127.0.0.1, talked to over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import PROJECT_ROOT, cli


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_serve_over_http(bundle_dir: Path) -> None:
    port = free_port()
    script = Path(sys.executable).parent / "attention-mt"
    env = {**os.environ, "MT_MAX_BATCH_SIZE": "8", "MT_GC_THRESHOLDS": "[5000, 20, 30]"}
    proc = subprocess.Popen(
        [str(script), "serve", "--port", str(port), "--bundles", str(bundle_dir)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if get(f"{base}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("server never became ready")
        body = json.dumps({"q": ["Tom chases Jerry.", "Mary likes Bob."], "source": "en", "target": "zh"}).encode()
        request = urllib.request.Request(
            f"{base}/v1/translate", data=body, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200
            assert "server" not in {k.lower() for k in r.headers}
            result = json.loads(r.read())
        assert len(result["translations"]) == 2
        assert get(f"{base}/livez") == (200, {"status": "alive"})
        assert get(f"{base}/v1/models")[1]["defaults"] == {"en-zh": "en-zh"}
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    # uvicorn finishes its shutdown, then re-raises SIGTERM so the exit status says how it ended
    assert proc.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    gc_line, ready = (next(i for i, e in enumerate(events) if e.get("event") == kind) for kind in ("gc", "ready"))
    assert gc_line < ready and "(5000, 20, 30)" in events[gc_line]["message"]  # tuned once warm, before ready


def test_serve_refuses_a_missing_bundle_directory(tmp_path: Path) -> None:
    result = cli("serve", "--port", str(free_port()), "--bundles", tmp_path / "none", timeout=60)
    assert result.returncode != 0
    assert "bundle directory does not exist" in result.stdout + result.stderr


def test_translate_cli_lines_in_order(bundle_dir: Path) -> None:
    script = Path(sys.executable).parent / "attention-mt"
    lines = "Tom chases Jerry.\nMary likes John today.\nBob helps Alice.\n"
    common = [str(script), "translate", "--source", "en", "--target", "zh", "--bundles", str(bundle_dir), "--beam", "1"]
    plain = subprocess.run(common, input=lines, capture_output=True, text=True, timeout=120, check=False)
    assert plain.returncode == 0, plain.stderr
    outputs = plain.stdout.splitlines()
    assert len(outputs) == 3
    as_json = subprocess.run([*common, "--json"], input=lines, capture_output=True, text=True, timeout=120, check=False)
    records = [json.loads(x) for x in as_json.stdout.splitlines()]
    assert [r["text"] for r in records] == outputs
    one = cli("translate", "Mary likes John today.", "--model", "en-zh", "--bundles", bundle_dir, "--beam", "1")
    assert one.stdout.strip() == outputs[1]
    shown = cli("translate", "Tom chases Jerry.", "--model", "en-zh", "--bundles", bundle_dir, "--attention")
    assert shown.returncode == 0 and ": " in shown.stdout.splitlines()[1]
    too_long = cli("translate", "--model", "en-zh", "--bundles", bundle_dir)  # stdin empty: nothing to do
    assert too_long.returncode != 0 or too_long.stdout == ""
