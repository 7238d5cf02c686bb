"""The malformed-input battery: every case gets the expected 4xx and an error body naming the
field; none gets a 5xx."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings
from tests.service.api.conftest import wait_ready

OK = {"q": "Tom chases Jerry.", "source": "en", "target": "zh"}
JSON = {"content-type": "application/json"}


def body(**changes: object) -> bytes:
    data = {**OK, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not ...}).encode()


CASES = [
    # (id, method, path, raw body, headers, status, code, field)
    ("empty body", "POST", "/v1/translate", b"", JSON, 422, "invalid_request", "body"),
    ("invalid json", "POST", "/v1/translate", b'{"q": "hi",', JSON, 400, "invalid_json", "body"),
    ("json array", "POST", "/v1/translate", b'["Tom chases Jerry."]', JSON, 422, "invalid_request", "body"),
    (
        "wrong content type",
        "POST",
        "/v1/translate",
        body(),
        {"content-type": "text/plain"},
        415,
        "unsupported_media_type",
        "body",
    ),
    ("body over the limit", "POST", "/v1/translate", body(q="x" * 5000), JSON, 413, "payload_too_large", "body"),
    (
        "deeply nested json",
        "POST",
        "/v1/translate",
        b'{"q": ' + b"[" * 50000 + b"]" * 50000 + b"}",
        JSON,
        413,
        "payload_too_large",
        "body",
    ),
    (
        "nested within the limit",
        "POST",
        "/v1/translate",
        b'{"q": ' + b"[" * 1500 + b"]" * 1500 + b"}",
        JSON,
        400,
        "invalid_json",
        "body",
    ),
    (
        "invalid utf-8",
        "POST",
        "/v1/translate",
        b'{"q": "\xff\xfe", "source": "en", "target": "zh"}',
        JSON,
        400,
        "invalid_json",
        "body",
    ),
    ("q missing", "POST", "/v1/translate", body(q=...), JSON, 422, "invalid_request", "q"),
    ("q null", "POST", "/v1/translate", body(q=None), JSON, 422, "invalid_request", "q"),
    ("q a number", "POST", "/v1/translate", body(q=42), JSON, 422, "invalid_request", "q"),
    ("q empty", "POST", "/v1/translate", body(q=""), JSON, 422, "invalid_text", "q"),
    ("q whitespace", "POST", "/v1/translate", body(q=" \t "), JSON, 422, "invalid_text", "q"),
    ("q over the character limit", "POST", "/v1/translate", body(q="a" * 201), JSON, 422, "input_too_long", "q"),
    (  # a text over the token limit is cut into sentences; a forced translation cannot be
        "forced_target over the token limit",
        "POST",
        "/v1/attention",
        json.dumps({"q": "Tom chases Jerry.", "model": "en-zh", "forced_target": "汤姆追杰瑞。" * 12}).encode(),
        JSON,
        422,
        "input_too_long",
        "forced_target",
    ),
    (
        "q lone surrogate",
        "POST",
        "/v1/translate",
        b'{"q": "a \\ud800 b", "source": "en", "target": "zh"}',
        JSON,
        422,
        "invalid_text",
        "q",
    ),
    ("q NUL", "POST", "/v1/translate", body(q="a\u0000b"), JSON, 422, "invalid_text", "q"),
    ("q control character", "POST", "/v1/translate", body(q="a\u001bb"), JSON, 422, "invalid_text", "q"),
    ("batch over the limit", "POST", "/v1/translate", body(q=["hi"] * 9), JSON, 422, "input_too_long", "q"),
    (
        "batch with one bad item",
        "POST",
        "/v1/translate",
        body(q=["hi", "ok", "a\u0000"]),
        JSON,
        422,
        "invalid_text",
        "q[2]",
    ),
    ("unknown field", "POST", "/v1/translate", body(colour="blue"), JSON, 422, "invalid_request", "colour"),
    ("beam_size 0", "POST", "/v1/translate", body(beam_size=0), JSON, 422, "invalid_request", "beam_size"),
    ("beam_size 99", "POST", "/v1/translate", body(beam_size=99), JSON, 422, "invalid_request", "beam_size"),
    ("beam_size as a string", "POST", "/v1/translate", body(beam_size="3"), JSON, 422, "invalid_request", "beam_size"),
    (
        "boolean as a string",
        "POST",
        "/v1/attention",
        json.dumps({"text": "hi", "model": "en-zh", "self_attention": "false"}).encode(),
        JSON,
        422,
        "invalid_request",
        "self_attention",
    ),
    (
        "n_best over beam_size",
        "POST",
        "/v1/translate",
        body(beam_size=2, n_best=3),
        JSON,
        422,
        "invalid_request",
        "n_best",
    ),
    (
        "negative max_output_tokens",
        "POST",
        "/v1/translate",
        body(max_output_tokens=-5),
        JSON,
        422,
        "invalid_request",
        "max_output_tokens",
    ),
    (
        "oversized max_output_tokens",
        "POST",
        "/v1/translate",
        body(max_output_tokens=100000),
        JSON,
        422,
        "invalid_request",
        "max_output_tokens",
    ),
    (
        "unknown language pair",
        "POST",
        "/v1/translate",
        body(source="fr", target="de"),
        JSON,
        422,
        "unsupported_language_pair",
        "source",
    ),
    ("GET on a POST route", "GET", "/v1/translate", None, {}, 405, "method_not_allowed", None),
    ("unknown route", "GET", "/v2/nothing", None, {}, 404, "not_found", None),
]


@pytest.mark.parametrize(
    ("case", "method", "path", "raw", "headers", "status", "code", "field"), CASES, ids=[c[0] for c in CASES]
)
def test_malformed_input(
    client: TestClient,
    case: str,
    method: str,
    path: str,
    raw: bytes | None,
    headers: dict[str, str],
    status: int,
    code: str,
    field: str | None,
) -> None:
    response = client.request(method, path, content=raw, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["field"] == field, error
    assert error["message"]


def test_the_battery_is_large_enough() -> None:
    assert len(CASES) >= 25


def test_unknown_pair_lists_the_supported_pairs(client: TestClient) -> None:
    message = client.post("/v1/translate", content=body(source="fr", target="de"), headers=JSON).json()["error"]
    assert "supported pairs: en-zh" in message["message"]


def test_a_maximal_answer_is_bounded_or_refused_with_advice(bundle_dir: Path) -> None:
    """With MT_MAX_ATTENTION_CELLS small, a request whose dense attention could pass it is refused
    with advice, and the narrowed request's answer stays under the stated bound."""
    settings = Settings(bundles=bundle_dir, max_attention_cells=50_000, max_texts=8, max_chars=200)
    longest = "Tom chases Jerry again today and Mary likes Bob."  # one sentence: n-best multiplies
    maximal = {**OK, "q": [longest] * 8, "beam_size": 8, "n_best": 8}
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        refused = c.post("/v1/translate", json=maximal)
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert error["field"] == "attention.format" and "topk" in error["message"] and error["limit"] == 50_000
        narrowed = c.post("/v1/translate", json={**maximal, "attention": {"format": "topk", "top_k": 3}})
        assert narrowed.status_code == 200
        # 50,000 weights of about 20 bytes of JSON each, plus tokens: well under 2 MB
        assert len(narrowed.content) < 2_000_000
