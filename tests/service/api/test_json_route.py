"""JsonBodyRoute answers every body as FastAPI's own route does (status, error code, field), and
refuses endpoints it cannot serve."""

from __future__ import annotations

import json

import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.testclient import TestClient

from service.api import errors
from service.api.json_route import JsonBodyRoute, body_model
from service.api.schemas import IntrospectBody, TranslateBody

BODIES = [
    b'{"q": "Tom chases Jerry."}',
    b'{"q": ["one", "two"], "beam_size": 4, "attention": {"format": "topk", "top_k": 2}}',
    b"",
    b"   ",
    b'{"q": "hi",',
    b"[1, 2]",
    b"null",
    b'"just a string"',
    b"{}",
    b'{"q": 42}',
    b'{"q": null}',
    b'{"q": ["a", 3]}',
    b'{"text": "hi"}',
    b'{"q": "hi", "beam_size": "four"}',
    b'{"q": "hi", "beam_size": 4.5}',
    b'{"q": "hi", "beam_size": "4"}',
    b'{"q": "hi", "timeout_ms": NaN}',
    b'{"q": "hi", "attention": {"format": "sparse"}}',
    b'{"q": "hi", "attention": []}',
    b'{"q": "a \\ud800 b"}',
    b'{"q": "\xff\xfe"}',
    b'{"q": ' + b"[" * 1500 + b"]" * 1500 + b"}",
    b'{"q": "hi", "q": "twice"}',
    b'\xef\xbb\xbf{"q": "a BOM first"}',
]


def client(route_class: type | None) -> TestClient:
    """An app with one endpoint that echoes its parsed body, under `route_class` (None: FastAPI's)."""
    router = APIRouter(route_class=route_class) if route_class else APIRouter()

    @router.post("/echo")
    async def echo(body: TranslateBody, request: Request) -> Response:
        return Response(json.dumps(body.model_dump()), media_type="application/json")  # escapes a lone surrogate

    app = FastAPI()
    errors.install(app)
    app.include_router(router)
    return TestClient(app)


@pytest.mark.parametrize("raw", BODIES, ids=range(len(BODIES)))
def test_answers_as_fastapi_does(raw: bytes) -> None:
    def answer(c: TestClient) -> tuple[int, object]:
        r = c.post("/echo", content=raw, headers={"content-type": "application/json"})
        data = r.json()
        return r.status_code, data if r.status_code == 200 else (data["error"]["code"], data["error"]["field"])

    assert answer(client(JsonBodyRoute)) == answer(client(None))


def test_a_lone_surrogate_reaches_the_model() -> None:
    """pydantic's JSON parser refuses the escape; the standard one takes it, so the text check can
    name the field (the service answers 422 invalid_text for `q`, tests/service/api/test_malformed.py)."""
    raw = b'{"q": "a \\ud800 b"}'
    r = client(JsonBodyRoute).post("/echo", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert json.loads(r.content)["q"] == "a \ud800 b"


def test_refuses_other_signatures() -> None:
    async def two_bodies(body: TranslateBody, other: IntrospectBody) -> Response:
        return Response()

    async def no_request(body: TranslateBody) -> Response:
        return Response()

    async def not_a_model(body: dict, request: Request) -> Response:  # type: ignore[type-arg]
        return Response()

    for endpoint in (two_bodies, no_request, not_a_model):
        with pytest.raises(TypeError, match="JsonBodyRoute needs"):
            body_model(endpoint)
    router = APIRouter(route_class=JsonBodyRoute)
    with pytest.raises(TypeError):
        router.post("/x")(no_request)


def test_the_openapi_schema_is_fastapis() -> None:
    """The docs describe the body as FastAPI's own route does."""
    ours, theirs = (client(c).app.openapi() for c in (JsonBodyRoute, None))  # type: ignore[attr-defined]
    assert ours == theirs
    assert "TranslateBody" in str(ours["paths"]["/echo"]["post"]["requestBody"])
