"""A route whose body is one JSON model, validated by pydantic's own JSON parser in one call.

FastAPI's request handler is general: per request it parses the content type with `email.message`,
decodes the body with the standard `json`, builds an endpoint context, solves the dependency
graph and validates the decoded dict in Python mode. For a handler `(body: Model, request)` the
same answer is `Model.model_validate_json(bytes)`: the parse and the validation in Rust, with
nothing else around it. At batch 1 the app runs with the caches a translation left cold, so what
it touches is what it costs: its own time around a translation 384 -> 272 us (two runs), and 32
clients 1.13x the requests a second (docs/benchmarks.md, "The JSON body parsed in one call"). The OpenAPI
schema is the route's as declared; the errors are FastAPI's `RequestValidationError`s, located
under `body`, so every answer is the same (tests/service/api/test_json_route.py).
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

Body = TypeVar("Body", bound=BaseModel)
Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class JsonBodyRoute(APIRoute):
    """For endpoints `async def f(body: SomeModel, request: Request) -> Response` only."""

    def get_route_handler(self) -> Handler:
        model, endpoint = body_model(self.endpoint), self.endpoint

        async def handler(request: Request) -> Response:
            response: Response = await endpoint(parsed(model, await request.body()), request)
            return response

        return handler


def parsed(model: type[Body], raw: bytes) -> Body:
    """`raw` as `model`, or the `RequestValidationError` FastAPI would raise, located under `body`."""
    if not raw:  # as FastAPI words an empty body
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        if not any(e["type"] == "json_invalid" for e in exc.errors()):
            raise RequestValidationError(_in_body(exc)) from None
    # pydantic's parser refuses a few things the standard one takes, a lone surrogate's escape among
    # them, which the text check then names as the field's own problem (422, not 400): decode it so
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": str(exc)}]) from None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise RequestValidationError(_in_body(exc)) from None


def _in_body(exc: ValidationError) -> list[Any]:
    return [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]


def body_model(endpoint: Callable[..., Any]) -> type[BaseModel]:
    """The model of `endpoint`'s first parameter; refuses any other signature at import."""
    names = list(inspect.signature(endpoint).parameters)
    hints = typing.get_type_hints(endpoint)
    model = hints.get(names[0]) if names else None
    if len(names) == 2 and isinstance(model, type) and issubclass(model, BaseModel) and hints.get(names[1]) is Request:
        return model
    raise TypeError(f"{endpoint.__name__}: JsonBodyRoute needs (body: Model, request: Request)")
