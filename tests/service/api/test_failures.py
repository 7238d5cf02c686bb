"""Failures that surface (issue 16): a startup failure of any kind logs its reason and `serve` exits
3; /readyz names the bundle, never its path; every 500 logs its traceback with the request id; a
fault inside the scheduler (a raising batch, a raising metrics hook) fails only its own requests.

Faults are real (an unreadable file, bytes that are not UTF-8, a raising handler), not mocks of the
code under test; every wait is on a process exit or a state change, with a generous bound."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import LOAD_FAILURE_EXIT_CODE, create_app
from service.api.logs import JsonFormatter
from service.settings import Settings
from tests.support.server import free_port

EN_ZH = {"source": "en", "target": "zh"}
EXIT_TIMEOUT_S = 120  # loading a tiny bundle takes seconds; this bound only catches a hang
# root reads any file whatever its mode; without these two capabilities it is refused like anyone
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def copy_bundle(bundle_dir: Path, tmp_path: Path) -> Path:
    """A bundle directory holding a copy of `en-zh` only, for a test to damage."""
    root = tmp_path / "bundles"
    shutil.copytree(bundle_dir / "en-zh", root / "en-zh")
    return root


def encoder_graph(bundle: Path) -> Path:
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    return bundle / str(manifest["graphs"]["encoder"]["file"])


def unreadable_by_permission(bundle: Path) -> list[str]:
    """chmod 000 on the encoder graph: its stat (size) passes, reading it raises PermissionError."""
    graph = encoder_graph(bundle)
    graph.chmod(0)
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    probe = [*NO_DAC, sys.executable, "-c", f"open({str(graph)!r}, 'rb')"]
    if b"PermissionError" not in subprocess.run(probe, capture_output=True, check=False).stderr:
        pytest.skip("running as root and cannot drop CAP_DAC_OVERRIDE: cannot make a file unreadable")
    return NO_DAC


def manifest_not_utf8(bundle: Path) -> list[str]:
    """A manifest with a byte that is not UTF-8: the reader raises UnicodeDecodeError, no EngineError."""
    manifest = bundle / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"en-zh"', b'"en-zh\xff"', 1))
    return []


UNEXPECTED = {
    "graph unreadable by permission": (unreadable_by_permission, "PermissionError"),
    "manifest not UTF-8": (manifest_not_utf8, "UnicodeDecodeError"),
}


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def serve_until_exit(bundles: Path, log: Path, prefix: list[str], *options: str) -> tuple[int, str]:
    """`attention-mt serve` on `bundles` (behind `prefix`, with `options`) until it exits on its own;
    its exit code and everything it logged."""
    script = Path(sys.executable).parent / "attention-mt"
    command = [*prefix, str(script), "serve", "--port", str(free_port()), "--bundles", str(bundles), *options]
    with log.open("w") as out:  # a file, not a pipe: an unread pipe could block the server's writes
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            returncode = proc.wait(timeout=EXIT_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return returncode, log.read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("fault", UNEXPECTED)
def test_serve_exits_3_with_the_reason_and_traceback_on_an_unexpected_load_error(
    bundle_dir: Path, tmp_path: Path, fault: str
) -> None:
    root = copy_bundle(bundle_dir, tmp_path)
    damage, error_type = UNEXPECTED[fault]
    prefix = damage(root / "en-zh")
    returncode, output = serve_until_exit(root, tmp_path / "serve.log", prefix)
    assert returncode == LOAD_FAILURE_EXIT_CODE, output
    failures = [x for x in json_lines(output) if x.get("event") == "load_failed"]
    assert len(failures) == 1, output
    failure = failures[0]
    assert failure["level"] == "error" and failure["error_type"] == error_type
    assert error_type in str(failure["message"])  # the reason, in the line itself
    assert str(failure["traceback"]).startswith("Traceback") and error_type in str(failure["traceback"])
    assert not any(x.get("event") == "ready" for x in json_lines(output))


def wait_for_load_failure(client: TestClient, timeout: float = 60.0) -> dict[str, object]:
    """Poll /readyz until loading has failed (the state changes once, in the background)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = client.get("/readyz")
        assert response.status_code == 503
        error: dict[str, object] = response.json()["error"]
        if error["code"] == "load_failed":
            return error
        time.sleep(0.05)
    raise AssertionError("loading never failed")


def missing_tokenizer(bundle: Path) -> None:
    (bundle / "zh.model").unlink()  # a BundleInvalid, whose message names the bundle's path


PATH_FREE = {
    "known problem": (missing_tokenizer, "bundle en-zh is invalid: zh.model: missing"),
    "unexpected error": (manifest_not_utf8, "model load failed (UnicodeDecodeError)"),
}


@pytest.mark.parametrize("fault", PATH_FREE)
def test_a_load_failure_is_named_without_paths_in_bodies_and_with_them_in_the_log(
    bundle_dir: Path, tmp_path: Path, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    root = copy_bundle(bundle_dir, tmp_path)
    damage, expected = PATH_FREE[fault]
    damage(root / "en-zh")
    with caplog.at_level(logging.ERROR, logger="attention_mt"), TestClient(create_app(Settings(bundles=root))) as c:
        error = wait_for_load_failure(c)
        refused = c.post("/v1/translate", json={"q": "hi", **EN_ZH})
        assert c.get("/livez").status_code == 200
    assert expected in str(error["message"])
    assert refused.status_code == 503 and expected in refused.json()["error"]["message"]
    for body in (json.dumps(error), refused.text):
        assert str(tmp_path) not in body and "/tmp" not in body
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "load_failed"]
    line = json.loads(JsonFormatter().format(record))
    if fault == "known problem":  # the log keeps the full message, path included
        assert str(root / "en-zh") in line["message"] and "traceback" not in line
    else:  # a bug or an environment fault: the log has the exception and where it was raised
        assert "UnicodeDecodeError" in line["message"] and line["traceback"].startswith("Traceback")


@pytest.fixture
def broken_translate(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The running app, its service's translate raising a bug; answering 500s as a real server does."""

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(client.app.state.service, "translate", broken)  # type: ignore[attr-defined]
    yield TestClient(client.app, raise_server_exceptions=False)


def internal_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "internal_error"]


REQUEST_IDS: dict[str, Callable[[], dict[str, str]]] = {
    "client's id": lambda: {"x-request-id": "fault-500-1"},
    "generated id": dict,
}


@pytest.mark.parametrize("given", REQUEST_IDS)
def test_a_500_logs_its_traceback_with_the_request_id(
    broken_translate: TestClient, caplog: pytest.LogCaptureFixture, given: str
) -> None:
    with caplog.at_level(logging.ERROR, logger="attention_mt"):
        response = broken_translate.post("/v1/translate", json={"q": "hi", **EN_ZH}, headers=REQUEST_IDS[given]())
    assert response.status_code == 500
    request_id = response.headers["x-request-id"]
    assert request_id in response.json()["error"]["message"]
    assert "boom" not in response.text and "Traceback" not in response.text
    assert response.headers["x-content-type-options"] == "nosniff"  # security headers on a 500 too
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    [record] = internal_errors(caplog)  # the handler logs before it answers
    line = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == request_id and line["level"] == "error"
    assert line["error_type"] == "RuntimeError" and line["error"] == "boom"
    assert "RuntimeError: boom" in line["message"]
    traceback = line["traceback"]
    assert traceback.startswith("Traceback") and "in broken" in traceback and traceback.endswith("RuntimeError: boom")


def test_a_raising_batch_and_a_raising_metrics_hook_fail_only_their_requests(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Faults inside the real scheduler: encoding one batch raises, and the batch-size metric's hook
    raises on every batch. The faulty request gets a 500 with a request id (its traceback logged),
    the others are served, and /readyz stays 200: the scheduler goes on."""
    service = client.app.state.service  # type: ignore[attr-defined]
    [translator] = [service.catalog.get(name) for name in service.catalog.models][:1]
    begin = translator.begin

    def begin_or_raise(src_ids: list[list[int]], options: object) -> object:
        if options.max_output_tokens == 7:  # type: ignore[attr-defined]  # marks the faulty request
            raise RuntimeError("the batch broke")
        return begin(src_ids, options)

    def raising_hook(size: int) -> None:
        raise ValueError("the metrics hook broke")

    monkeypatch.setattr(translator, "begin", begin_or_raise)
    monkeypatch.setattr(service.scheduler, "on_batch", raising_hook)
    answers = TestClient(client.app, raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="attention_mt"):
        bad = answers.post("/v1/translate", json={"q": "hello", "max_output_tokens": 7, **EN_ZH})
        good = answers.post("/v1/translate", json={"q": "hello", **EN_ZH})
    assert bad.status_code == 500 and bad.headers["x-request-id"] in bad.json()["error"]["message"]
    assert good.status_code == 200 and good.json()["translations"][0]["text"]
    assert answers.get("/readyz").status_code == 200
    events = {getattr(r, "event", None) for r in caplog.records}
    assert {"batch_failed", "hook_failed", "internal_error"} <= events
    [failure] = [r for r in caplog.records if getattr(r, "event", None) == "batch_failed"]
    assert "the batch broke" in JsonFormatter().format(failure)
