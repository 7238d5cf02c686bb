"""The JSON body routes answered as soon as the edge's middleware lets a request through.

Between our middleware and a route, Starlette and FastAPI pass every request through their
exception middleware, an exit stack for dependencies, the router's match over every route and the
route's own request/response wrapper. For the routes whose body is one JSON model (`JsonBodyRoute`:
/v1/translate, /v1/attention, /v1/attention/svg) none of that does anything: they have no
dependencies, match one method and path, and parse their own body. At batch 1 a translation leaves
the caches cold, so every layer a request passes through costs about three times its warm time:
this shortcut took 0.09-0.17 ms of the event loop's CPU off a batch-1 /v1/translate (two servers
side by side, docs/benchmarks.md).

The routes stay FastAPI's (their OpenAPI schema, and the path any other method takes); only the
way in is shorter. Errors go to the app's own exception handlers, chosen as Starlette's exception
middleware chooses them, and anything without one goes on to Starlette's server-error handler, as
before (tests/service/api/test_direct.py compares answers both ways). Where FastAPI's OpenTelemetry
tracing is on, requests take the router, which records the route on the request's span.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import Request, Response
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.json_route import Handler, JsonBodyRoute

ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


class DirectRoutes:
    """The innermost middleware: answers the JSON body routes itself, passes on everything else."""

    def __init__(self, app: ASGIApp, routes: Iterable[BaseRoute]) -> None:
        self.app = app
        self.handlers: dict[tuple[str, str], Handler] = {
            (method, route.path): route.get_route_handler()
            for route in routes
            if isinstance(route, JsonBodyRoute) and not route.param_convertors  # fixed paths only
            for method in route.methods or ()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.handlers.get((scope["method"], route_path(scope))) if scope["type"] == "http" else None
        traced = scope.get("fastapi.telemetry") is not None  # the router names the route on the span
        if handler is None or traced:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await handler(request)
        except Exception as exc:
            on_error = handler_for(exc, scope["app"].exception_handlers)
            if on_error is None:
                raise  # Starlette's server-error middleware answers 500, as for any route
            response = await on_error(request, exc)
        await response(scope, receive, send)


def route_path(scope: Scope) -> str:
    """The path the router matches: without the root path a proxy serves the app under."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def handler_for(exc: Exception, handlers: dict[Any, ErrorHandler]) -> ErrorHandler | None:
    """The handler Starlette's exception middleware would call for `exc`: by status code for an
    HTTPException, then by the nearest class. `Exception`'s and 500's belong to the server-error
    middleware, which answers the exceptions without one."""
    if isinstance(exc, HTTPException) and exc.status_code != 500 and exc.status_code in handlers:
        return handlers[exc.status_code]
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in handlers:
            return handlers[cls]
    return None
