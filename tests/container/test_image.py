"""The image a user would build: built from the Dockerfile, run, and talked to for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import FIGURES, PROJECT_ROOT
from tests.container.conftest import Running, container, start


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return r.status, json.loads(r.read())


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run([hadolint, str(PROJECT_ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_translate_attention_and_metrics(served: Running) -> None:
    status, result = post(f"{served.url}/v1/translate", {"q": "Tom chases Jerry.", "source": "en", "target": "zh"})
    assert status == 200 and result["translations"][0]["attention"]
    status, result = post(f"{served.url}/v1/attention", {"text": "Tom chases Jerry.", "model": "en-zh"})
    assert status == 200 and result["cross_attention"]
    with urllib.request.urlopen(f"{served.url}/metrics", timeout=10) as r:
        assert "translator_requests_total" in r.read().decode()


def test_a_mounted_converted_marian_bundle_is_served(served: Running) -> None:
    status, result = post(f"{served.url}/v1/translate", {"q": "Tom chases Jerry.", "source": "en", "target": "de"})
    assert status == 200 and result["model"] == "en-de"
    assert result["translations"][0]["source_tokens"][0]["text"] == ">>deu<<"


def test_runs_as_non_root_without_torch(served: Running) -> None:
    uid = container("exec", served.name, "id", "-u").stdout.strip()
    assert uid not in ("", "0")
    for module in ("torch", "transformers"):  # the serving image holds neither
        found = container("exec", served.name, "python", "-c", f"import {module}")
        assert found.returncode != 0 and f"No module named '{module}'" in found.stderr
    packages = container("exec", served.name, "pip", "list", "--format=freeze").stdout.lower()
    assert sum(line.startswith("onnxruntime") for line in packages.splitlines()) == 1
    inspected = json.loads(container("image", "inspect", "attention-mt:test").stdout)[0]
    config = inspected["Config"]
    assert config["User"].split(":")[0] not in ("", "0", "root")
    assert config["Cmd"][0] == "attention-mt"  # exec form: the server is PID 1 and gets SIGTERM
    assert "/livez" in " ".join(inspected["Healthcheck"]["Test"])


def test_sigterm_exits_within_the_grace_period(image: str, readable_bundles: Path) -> None:
    running = start(image, readable_bundles, f"amt-stop-{os.getpid()}")
    try:
        started = time.monotonic()
        stopped = container("stop", "-t", "25", running.name)  # SIGTERM, then SIGKILL after 25 s
        seconds = time.monotonic() - started
        assert stopped.returncode == 0
        state = json.loads(container("inspect", running.name).stdout)[0]["State"]
        FIGURES["container SIGTERM to exit s"] = round(seconds, 2)
        assert seconds < 25 and state["ExitCode"] == 0, state
        assert (
            "Application shutdown complete"
            in container("logs", running.name).stderr + container("logs", running.name).stdout
        )
    finally:
        container("rm", "-f", running.name)


def test_two_workers_on_a_read_only_root_serve_add_up_metrics_and_stop_cleanly(
    image: str, readable_bundles: Path
) -> None:
    """As the Kubernetes manifests run it: MT_WORKERS=2, a read-only root with /tmp in memory (the
    workers' metrics files live there)."""
    options = ("-e", "MT_WORKERS=2", "--read-only", "--tmpfs", "/tmp:size=64m")
    running = start(image, readable_bundles, f"amt-workers-{os.getpid()}", *options)
    try:
        deadline = time.monotonic() + 120
        while (logs := _logs(running.name)).count('"event": "ready"') < 2:
            assert time.monotonic() < deadline, logs[-3000:]
            time.sleep(0.2)
        # the image built the operator library and has onnx: the int8 bundle's graphs load fused, and
        # every decoder step's attentions
        ready = [line for line in logs.splitlines() if '"event": "ready"' in line]
        assert all("fused operators: " in line and "en-zh-int8 (encoder: " in line for line in ready), ready
        assert all(line.count("CacheAttention") >= 2 for line in ready), ready
        for _ in range(6):
            assert post(f"{running.url}/v1/translate", {"q": "Tom chases Jerry.", "model": "en-zh"})[0] == 200
        with urllib.request.urlopen(f"{running.url}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert 'translator_requests_total{route="/v1/translate",status="200"} 6.0' in metrics
        stopped = container("stop", "-t", "25", running.name)
        state = json.loads(container("inspect", running.name).stdout)[0]["State"]
        assert stopped.returncode == 0 and state["ExitCode"] == 0, (state, _logs(running.name)[-3000:])
        assert _logs(running.name).count("Application shutdown complete") == 2
    finally:
        container("rm", "-f", running.name)


def _logs(name: str) -> str:
    result = container("logs", name)
    return result.stdout + result.stderr
