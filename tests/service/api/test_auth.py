"""API keys and per-key rate limits (issue 8, item 8)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.auth import ApiKeyAuth, KeyRing
from service.settings import Settings
from tests.service.api.conftest import wait_ready

KEY1, KEY2 = "k1-0123456789-secret", "k2-abcdefghij-secret"
BODY = {"q": "Tom chases Jerry.", "source": "en", "target": "zh", "beam_size": 1}


@pytest.fixture(scope="module")
def guarded(bundle_dir: Path) -> Iterator[TestClient]:
    settings = Settings(bundles=bundle_dir, api_keys=(KEY1, KEY2), rate_limit_per_minute=3)
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def test_keys_are_required_and_checked(guarded: TestClient) -> None:
    missing = guarded.post("/v1/translate", json=BODY)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthorized"
    wrong = guarded.post("/v1/translate", json=BODY, headers={"x-api-key": KEY1[:-1] + "X"})
    assert wrong.status_code == 401
    for path in ("/livez", "/readyz", "/metrics"):
        assert guarded.get(path).status_code == 200, path


def test_rate_limit_per_key(guarded: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    answers = [guarded.post("/v1/translate", json=BODY, headers={"x-api-key": KEY2}).status_code for _ in range(4)]
    assert answers[:3] == [200, 200, 200]
    limited = guarded.post("/v1/translate", json=BODY, headers={"x-api-key": KEY2})
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limited"
    # the other key has its own bucket
    assert guarded.post("/v1/translate", json=BODY, headers={"x-api-key": KEY1}).status_code == 200
    # keys never reach logs or metrics
    logged = "\n".join(r.getMessage() + repr(vars(r)) for r in caplog.records)
    metrics = guarded.get("/metrics").text
    for key in (KEY1, KEY2):
        assert key not in logged and key not in metrics


def test_auth_is_off_by_default(client: TestClient) -> None:
    assert client.post("/v1/translate", json=BODY).status_code == 200


def test_every_key_is_compared() -> None:
    calls = []

    auth = ApiKeyAuth(lambda *a: None, KeyRing(("a", "b", "c"), per_minute=0))  # type: ignore[arg-type]
    import hmac as real_hmac

    original = real_hmac.compare_digest
    try:
        real_hmac.compare_digest = lambda x, y: calls.append(y) or original(x, y)  # type: ignore[assignment]
        assert auth.identify(b"a") == "key-1"
    finally:
        real_hmac.compare_digest = original
    assert calls == [b"a", b"b", b"c"]  # no early exit on the first match
