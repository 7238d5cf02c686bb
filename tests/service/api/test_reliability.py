"""Reliability and exposure (issue 8, first items): internal errors, deadlines, CORS, docs switch,
startup ordering and load failure, JSON logs that never hold the user's text."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings
from tests.conftest import FIGURES
from tests.service.api.conftest import wait_ready
from tests.support.server import RunningServer, free_port

EN_ZH = {"source": "en", "target": "zh"}


def test_an_internal_error_is_a_500_with_a_request_id_and_nothing_else(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret detail at /srv/app/service/engine/service.py")

    monkeypatch.setattr(client.app.state.service, "translate", broken)  # type: ignore[attr-defined]
    answering = TestClient(client.app, raise_server_exceptions=False)  # as a real server would answer
    response = answering.post("/v1/translate", json={"q": "hi", **EN_ZH}, headers={"x-request-id": "abc-123"})
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "abc-123"
    error = response.json()["error"]
    assert error["code"] == "internal_error" and "abc-123" in error["message"]
    assert "secret" not in response.text and "/srv" not in response.text and "Traceback" not in response.text


def test_a_deadline_gives_504_and_the_next_request_is_served(client: TestClient) -> None:
    slow = {"q": ["Tom chases Jerry today."] * 8, **EN_ZH, "beam_size": 8, "timeout_ms": 1}
    response = client.post("/v1/translate", json=slow)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "deadline_exceeded" and response.json()["error"]["field"] == "timeout_ms"
    assert client.post("/v1/translate", json={"q": "Tom chases Jerry.", **EN_ZH}).status_code == 200


def test_every_response_has_a_request_id(client: TestClient) -> None:
    first, second = client.get("/livez"), client.get("/livez")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert client.get("/livez", headers={"x-request-id": "bad id with spaces"}).headers["x-request-id"] != (
        "bad id with spaces"
    )


@pytest.fixture(scope="module")
def strict_app(bundle_dir: Path) -> TestClient:
    settings = Settings(bundles=bundle_dir, docs=False, cors_origins=("https://ok.example",))
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c  # type: ignore[misc]


def test_cors_denies_unlisted_origins(client: TestClient, strict_app: TestClient) -> None:
    preflight = {"origin": "https://evil.example", "access-control-request-method": "POST"}
    assert "access-control-allow-origin" not in client.options("/v1/translate", headers=preflight).headers
    assert "access-control-allow-origin" not in strict_app.options("/v1/translate", headers=preflight).headers
    allowed = strict_app.options("/v1/translate", headers={**preflight, "origin": "https://ok.example"})
    assert allowed.headers["access-control-allow-origin"] == "https://ok.example"


def test_docs_can_be_switched_off(client: TestClient, strict_app: TestClient) -> None:
    assert client.get("/openapi.json").status_code == 200
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert strict_app.get(path).status_code == 404


def _zero_decoder(bundle: Path) -> None:
    graph = bundle / "decoder.onnx"
    graph.write_bytes(b"\0" * graph.stat().st_size)


def _unreadable_graph_with_matching_checksum(bundle: Path) -> None:
    from export.bundle_writer import write_manifest

    (bundle / "encoder.onnx").write_bytes(b"not an onnx graph")
    doc = json.loads((bundle / "manifest.json").read_text())
    write_manifest(bundle, {k: v for k, v in doc.items() if k != "files"})


def _io_disagrees(bundle: Path) -> None:
    doc = json.loads((bundle / "manifest.json").read_text())
    doc["graphs"]["decoder"]["outputs"][0]["name"] = "logits"
    (bundle / "manifest.json").write_text(json.dumps(doc))


CORRUPTIONS = {
    "checksum mismatch": (_zero_decoder, "decoder.onnx: sha256 mismatch"),
    "missing file": (lambda b: (b / "zh.model").unlink(), "zh.model: missing"),
    "corrupt onnx": (_unreadable_graph_with_matching_checksum, "encoder.onnx: onnxruntime cannot load it"),
    "graph io disagrees": (_io_disagrees, "output 'logits' is in the manifest but not in the graph"),
}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_a_bad_bundle_stops_the_server_fast_with_one_line(bundle_dir: Path, tmp_path: Path, corruption: str) -> None:
    broken = tmp_path / "bundles"
    shutil.copytree(bundle_dir, broken)
    damage, expected = CORRUPTIONS[corruption]
    damage(broken / "en-zh")
    port = free_port()
    script = Path(sys.executable).parent / "attention-mt"
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(script), "serve", "--port", str(port), "--bundles", str(broken)], stdout=out, stderr=subprocess.STDOUT
        )
        ever_ready = False
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() - started < 30:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                    ever_ready = ever_ready or r.status == 200
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        proc.wait(timeout=10)
    seconds = time.monotonic() - started
    assert proc.returncode == 3 and seconds < 30 and not ever_ready
    failures = [json.loads(line) for line in log.read_text().splitlines() if '"load_failed"' in line]
    assert len(failures) == 1 and expected in failures[0]["message"], failures
    FIGURES[f"bad bundle ({corruption})"] = f"exit 3 after {seconds:.1f} s"


def test_readyz_says_draining(client: TestClient) -> None:
    client.app.state.draining = True  # type: ignore[attr-defined]  # what SIGTERM sets first
    try:
        response = client.get("/readyz")
        assert response.status_code == 503 and response.json()["error"]["code"] == "draining"
        assert client.get("/livez").status_code == 200
    finally:
        client.app.state.draining = False  # type: ignore[attr-defined]


def test_livez_answers_before_readyz_and_logs_are_json_without_user_text(bundle_dir: Path) -> None:
    server = RunningServer(bundle_dir)
    try:
        marker = "Zyxwvut quokka"
        body = json.dumps({"q": marker, **EN_ZH}).encode()
        request = urllib.request.Request(
            f"{server.url}/v1/translate",
            data=body,
            headers={"content-type": "application/json", "x-request-id": "req-42"},
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            assert r.status == 200
    finally:
        output = server.stop()
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert lines and len(lines) == len([x for x in output.splitlines() if x.strip()])  # every line is JSON
    requests = [x for x in lines if x.get("event") == "request"]
    assert any(x["request_id"] == "req-42" and x["route"] == "/v1/translate" and x["status"] == 200 for x in requests)
    assert marker not in output and "quokka" not in output
    events = [x.get("event") for x in lines]
    before_ready = [x for x in lines[: events.index("ready")] if x.get("event") == "request"]
    assert all(x["status"] == 503 for x in before_ready if x["route"] == "/readyz")


def test_livez_never_depends_on_the_models(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(bundles=tmp_path / "missing"))) as c:
        assert c.get("/livez").status_code == 200
        time.sleep(0.5)
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "1"
        refused = c.post("/v1/translate", json={"q": "hi", **EN_ZH})
        assert refused.status_code == 503 and "bundle directory does not exist" in refused.json()["error"]["message"]
        assert c.get("/livez").status_code == 200
