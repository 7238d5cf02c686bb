"""DirectRoutes answers the JSON body routes exactly as FastAPI's routing does: the same status,
body and headers for answers, refusals and faults; every other request goes on to the router."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException

from service.api.app import create_app
from service.api.direct import DirectRoutes, ErrorHandler, handler_for, route_path
from service.engine.errors import EngineError, Overloaded
from service.settings import Settings
from tests.service.api.conftest import wait_ready

EN_ZH = {"source": "en", "target": "zh"}
JSON = {"content-type": "application/json"}
# (method, path, body): answers, refusals of every kind, and the paths the shortcut must not take
REQUESTS: list[tuple[str, str, Any]] = [
    ("POST", "/v1/translate", {"q": "Tom chases Jerry.", **EN_ZH}),
    ("POST", "/v1/translate", {"q": ["I am full.", "Where is it?"], "beam_size": 4, "n_best": 2, **EN_ZH}),
    ("POST", "/v1/translate", {"q": "Tom.", "attention": {"format": "topk", "top_k": 2}, **EN_ZH}),
    ("POST", "/v1/attention", {"q": "Tom chases Jerry.", **EN_ZH}),
    ("POST", "/v1/attention/svg", {"q": "Tom chases Jerry.", **EN_ZH}),
    ("POST", "/v1/translate", b'{"q": "hi",'),  # not JSON
    ("POST", "/v1/translate", b""),  # no body
    ("POST", "/v1/translate", {"q": 42}),  # a field of the wrong type
    ("POST", "/v1/translate", {"q": ["a"] * 9, **EN_ZH}),  # more texts than the setting allows
    ("POST", "/v1/translate", {"q": "x" * 201, **EN_ZH}),  # a text over the limit
    ("POST", "/v1/translate", {"q": "hi", "model": "no-such-model"}),
    ("POST", "/v1/translate", {"q": "hi", "beam_size": 99, **EN_ZH}),
    ("POST", "/v1/attention", {"q": "hi", "layers": [7], **EN_ZH}),
    ("POST", "/v1/translate", b"x" * 5000),  # over the body limit (BodyLimit, outside)
    ("GET", "/v1/translate", None),  # another method: the router's 405
    ("POST", "/v1/translate/", {"q": "hi", **EN_ZH}),  # another path: the router's answer
    ("GET", "/v1/models", None),
]


def without_direct(app: FastAPI) -> FastAPI:
    """`app` routed by FastAPI alone (before its middleware stack is built)."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not DirectRoutes]  # type: ignore[comparison-overlap]
    return app


@pytest.fixture(scope="module")
def clients(bundle_dir: Path) -> Iterator[tuple[TestClient, TestClient]]:
    settings = Settings(bundles=bundle_dir, max_texts=8, max_chars=200, max_body_bytes=4096)
    direct, routed = create_app(settings), without_direct(create_app(settings))
    with TestClient(direct) as a, TestClient(routed) as b:
        wait_ready(a)
        wait_ready(b)
        yield a, b


def answer(client: TestClient, method: str, path: str, body: Any, request_id: str) -> tuple[Any, ...]:
    headers = {**JSON, "x-request-id": request_id}
    raw = body if isinstance(body, bytes) else None
    r = client.request(method, path, json=None if raw is not None else body, content=raw, headers=headers)
    kept = {k: v for k, v in r.headers.items() if k != "content-length"}
    return r.status_code, kept, r.content


@pytest.mark.parametrize("i", range(len(REQUESTS)), ids=[f"{m} {p} {i}" for i, (m, p, _) in enumerate(REQUESTS)])
def test_every_answer_is_the_routed_one(clients: tuple[TestClient, TestClient], i: int) -> None:
    method, path, body = REQUESTS[i]
    direct, routed = (answer(c, method, path, body, f"same-{i}") for c in clients)
    assert direct == routed
    assert direct[1]["x-request-id"] == f"same-{i}"


def shortcut_of(app: FastAPI) -> DirectRoutes:
    """The DirectRoutes instance in `app`'s built middleware stack."""
    layer = app.middleware_stack
    while not isinstance(layer, DirectRoutes):
        layer = layer.app  # type: ignore[union-attr]
    return layer


def test_the_shortcut_takes_the_json_body_routes(clients: tuple[TestClient, TestClient]) -> None:
    direct = clients[0]
    shortcut = shortcut_of(direct.app)  # type: ignore[arg-type]
    assert sorted(shortcut.handlers) == [
        ("POST", "/v1/attention"),
        ("POST", "/v1/attention/svg"),
        ("POST", "/v1/translate"),
    ]
    taken: list[str] = []
    kept = dict(shortcut.handlers)
    for key, handler in kept.items():

        async def counted(request: Any, handler: Any = handler, path: str = key[1]) -> Any:
            taken.append(path)
            return await handler(request)

        shortcut.handlers[key] = counted
    try:
        for method, path, body in REQUESTS:
            answer(direct, method, path, body, "counted")
    finally:
        shortcut.handlers.update(kept)
    assert taken == [p for m, p, _ in REQUESTS if (m, p) in kept]  # only those, every time


def test_a_fault_answers_500_with_the_request_id_either_way(
    clients: tuple[TestClient, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    answers = []
    for c in clients:
        monkeypatch.setattr(c.app.state.service, "translate", broken)  # type: ignore[attr-defined]
        quiet = TestClient(c.app, raise_server_exceptions=False)
        answers.append(answer(quiet, "POST", "/v1/translate", {"q": "hi", **EN_ZH}, "fault-1"))
    assert answers[0] == answers[1]
    status, headers, content = answers[0]
    assert status == 500 and b"fault-1" in content and b"boom" not in content
    assert headers["x-request-id"] == "fault-1" and headers["x-content-type-options"] == "nosniff"


async def _handler(request: Request, exc: Exception) -> Response:
    return Response()


async def _by_status(request: Request, exc: Exception) -> Response:
    return Response()


async def _by_class(request: Request, exc: Exception) -> Response:
    return Response()


def test_handlers_are_chosen_as_starlettes_exception_middleware_chooses() -> None:
    handlers: dict[Any, ErrorHandler] = {
        EngineError: _by_class,
        HTTPException: _handler,
        404: _by_status,
        500: _handler,
        Exception: _handler,
        RequestValidationError: _handler,
    }
    assert handler_for(Overloaded("full"), handlers) is _by_class  # the nearest class
    assert handler_for(HTTPException(404), handlers) is _by_status  # a status code first
    assert handler_for(HTTPException(405), handlers) is _handler
    assert handler_for(HTTPException(500), {500: _by_status, HTTPException: _handler}) is _handler
    assert handler_for(RuntimeError("bug"), handlers) is None  # the server-error middleware's
    assert handler_for(KeyError("bug"), {LookupError: _by_class}) is _by_class


def test_the_route_path_drops_a_root_path() -> None:
    assert route_path({"path": "/api/v1/translate", "root_path": "/api"}) == "/v1/translate"
    assert route_path({"path": "/v1/translate", "root_path": ""}) == "/v1/translate"
    assert route_path({"path": "/v1/translate"}) == "/v1/translate"


def test_a_traced_request_takes_the_router() -> None:
    """With FastAPI's OpenTelemetry tracing on, the router records the route on the span: the
    shortcut steps aside."""
    reached: list[str] = []

    async def routed(scope: Any, receive: Any, send: Any) -> None:
        reached.append("router")

    async def translate(request: Any) -> Response:
        reached.append("shortcut")
        return Response()

    async def send(message: Any) -> None: ...

    shortcut = DirectRoutes(routed, [])
    shortcut.handlers[("POST", "/v1/translate")] = translate
    scope = {"type": "http", "method": "POST", "path": "/v1/translate", "fastapi.telemetry": object()}
    asyncio.run(shortcut(scope, None, None))  # type: ignore[arg-type]
    assert reached == ["router"]
    del scope["fastapi.telemetry"]
    asyncio.run(shortcut(scope, None, send))  # type: ignore[arg-type]
    assert reached == ["router", "shortcut"]
