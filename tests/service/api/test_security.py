"""Security hygiene (issue 16): CSP and friends on every answer, the page and docs without a key,
request headers bounded (431), and error bodies without filesystem paths. Against a real
`attention-mt serve` (uvicorn), except the load failure, which `serve` answers by exiting."""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.routes import STATIC_DIR
from service.engine.bundle import sha256_of
from service.settings import Settings
from tests.support.server import RunningServer

KEY = "security-test-key-0123456789"
PAGE_PATHS = ("/", "/static/app.js", "/static/style.css")
DOC_PATHS = ("/docs", "/redoc", "/openapi.json", "/docs-assets/swagger-ui.css")
LIMIT = Settings().max_header_bytes
TOO_LARGE = {
    "code": "headers_too_large",
    "message": f"the request headers are over {LIMIT} bytes",
    "field": "headers",
    "limit": LIMIT,
}


@pytest.fixture(scope="module")
def server(bundle_dir: Path) -> Iterator[RunningServer]:
    running = RunningServer(bundle_dir, env={"MT_API_KEYS": json.dumps([KEY])})
    yield running
    running.stop()


def fetch(server: RunningServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(server.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def directives(policy: str) -> dict[str, list[str]]:
    parts = (d.split() for d in policy.split(";") if d.strip())
    return {p[0]: p[1:] for p in parts}


def assert_hardened(headers: dict[str, str], where: str) -> dict[str, list[str]]:
    assert headers.get("x-content-type-options") == "nosniff", where
    assert headers.get("x-frame-options") == "DENY", where
    policy = directives(headers.get("content-security-policy", ""))
    assert policy.get("frame-ancestors") == ["'none'"], where
    return policy


def test_every_answer_is_hardened(server: RunningServer) -> None:
    answers = {
        path: fetch(server, path)
        for path in (*PAGE_PATHS, "/livez", "/readyz", "/v1/models", "/no-such-page", "/static/nothing.js")
    }
    answers["/v1/models (key)"] = fetch(server, "/v1/models", {"x-api-key": KEY})
    assert answers["/v1/models"][0] == 401 and answers["/v1/models (key)"][0] == 200
    for where, (_, headers, _) in answers.items():
        policy = assert_hardened(headers, where)
        # the page's policy: nothing inline, nothing from elsewhere
        assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"], where
        assert policy["default-src"] == ["'none'"], where


def test_docs_run_their_inline_script_by_a_fresh_nonce(server: RunningServer) -> None:
    for path in ("/docs", "/redoc"):
        nonces = []
        for _ in range(2):
            status, headers, body = fetch(server, path)
            assert status == 200, path
            policy = assert_hardened(headers, path)
            [nonce] = [s[len("'nonce-") : -1] for s in policy["script-src"] if s.startswith("'nonce-")]
            assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in policy["script-src"]
            scripts = re.findall(rb"<script[^>]*>", body)
            assert scripts and all(f'nonce="{nonce}"'.encode() in s for s in scripts), scripts
            nonces.append(nonce)
        assert nonces[0] != nonces[1], "a nonce is never reused"


class InlineFinder(HTMLParser):
    """Everything a strict CSP would block in markup: inline scripts, <style>, style= and on*= attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if (tag == "script" and "src" not in names) or tag == "style":
            self.found.append(f"<{tag}>")
        self.found += [f"{tag}[{n}]" for n in names if n == "style" or n.startswith("on")]
        self.found += [f"{tag}[{n}]" for n, v in attrs if (v or "").strip().lower().startswith("javascript:")]


def test_the_page_has_nothing_inline(server: RunningServer) -> None:
    status, _, body = fetch(server, "/")
    assert status == 200
    finder = InlineFinder()
    finder.feed(body.decode())
    assert finder.found == []
    for html in STATIC_DIR.glob("*.html"):
        finder = InlineFinder()
        finder.feed(html.read_text(encoding="utf-8"))
        assert finder.found == [], html.name


def test_the_page_and_the_docs_need_no_key(server: RunningServer) -> None:
    for path in (*PAGE_PATHS, *DOC_PATHS, "/livez", "/readyz"):
        assert fetch(server, path)[0] == 200, path
    # everything else still does, including paths that only look like the open ones
    for path in ("/v1/models", "/v1/models/en-zh", "/docsx", "/staticky"):
        assert fetch(server, path)[0] == 401, path


def test_headers_over_the_limit_get_431(server: RunningServer) -> None:
    ok, _, _ = fetch(server, "/livez", {"x-padding": "a" * (LIMIT - 2048)})
    assert ok == 200
    # just over (the app's HeaderLimit), and the 70 KB once accepted and 5 MB (refused by the
    # connection before the head ends: httptools alone would hold any head whole)
    for size in (LIMIT + 1024, 70 * 1024, 5 * 1024 * 1024):
        status, headers, body = fetch(server, "/livez", {"x-padding": "a" * size})
        assert status == 431, size
        assert json.loads(body)["error"] == TOO_LARGE
        assert_hardened(headers, f"431 for {size} bytes")
    assert '"event": "head_too_large"' in server.output()
    assert fetch(server, "/livez")[0] == 200


def broken_bundles(bundle_dir: Path, root: Path) -> Path:
    """A bundle whose encoder is garbage with a matching checksum: onnxruntime names its path."""
    target = root / "en-zh"
    shutil.copytree(bundle_dir / "en-zh", target)
    encoder = target / "encoder.onnx"
    encoder.write_bytes(b"not an onnx graph")
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"]["encoder.onnx"] = {"sha256": sha256_of(encoder), "size": encoder.stat().st_size}
    (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


def test_error_bodies_name_no_paths(bundle_dir: Path, tmp_path: Path) -> None:
    root = broken_bundles(bundle_dir, tmp_path / "secret-place" / "bundles")
    with TestClient(create_app(Settings(bundles=root))) as client:
        deadline = time.monotonic() + 30
        while client.app.state.load_error is None and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.05)
        answers = [client.get(p) for p in ("/v1/models", "/readyz")]
        answers.append(client.post("/v1/translate", json={"q": "Tom chases Jerry.", "model": "en-zh"}))
    assert [a.status_code for a in answers] == [503, 503, 503]
    load_error = next(a.json()["error"]["message"] for a in answers if "en-zh" in a.text)
    assert "encoder.onnx" in load_error  # still says what to fix, by the bundle's name
    for answer in answers:
        assert "secret-place" not in answer.text and str(tmp_path) not in answer.text, answer.text
        assert not re.search(r"(?<![\w.-])/(tmp|home|root|var|usr)\b", answer.text), answer.text
