"""One error body for everything the service refuses: {"error": {code, message, field, limit}}.

Domain errors from the engine are mapped to HTTP status codes here, and only here."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.presentation import json_path
from service.api.security import DEFAULT_HEADERS
from service.engine.bundle import BundleInvalid
from service.engine.errors import (
    CallerLeft,
    DeadlineExceeded,
    EngineError,
    InputTooLong,
    InvalidRequest,
    InvalidText,
    NotReady,
    Overloaded,
    UnknownModel,
    UnsupportedPair,
)

log = logging.getLogger("attention_mt")
STATUS = {
    InputTooLong: 422,
    InvalidText: 422,
    InvalidRequest: 422,
    UnsupportedPair: 422,
    UnknownModel: 422,
    Overloaded: 503,
    NotReady: 503,
    DeadlineExceeded: 504,
    CallerLeft: 499,  # nginx's code for it: nobody reads the answer, the access log does
}
HTTP_CODES = {
    400: "invalid_json",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    503: "not_ready",
}


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    limit: int | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message, "field": field, "limit": limit}
    return JSONResponse({"error": body}, status_code=status, headers=headers or None)


_UNION_TAGS = {"str", "int", "float", "bool", "none", "list", "dict"}


def _is_union_tag(part: Any) -> bool:
    """Pydantic names the branch of a union in the location (`q.str`, `q.list[str]`); drop it."""
    return isinstance(part, str) and (part in _UNION_TAGS or "[" in part or part.startswith("function-"))


def _field(loc: tuple[Any, ...]) -> str:
    parts = [p for p in loc if p != "body" and not _is_union_tag(p)]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return error_response(400, "invalid_json", f"the body is not valid JSON: {first.get('msg')}", "body")
    missing = [_field(tuple(e["loc"])) for e in errors if e.get("type") == "missing"]
    unknown = [_field(tuple(e["loc"])) for e in errors if e.get("type") == "extra_forbidden"]
    if missing and unknown:  # most likely one name for another: `text` sent where `q` is expected
        names = ", ".join(f"`{u}`" for u in unknown)
        message = f"`{missing[0]}` is required (this endpoint has no field {names})"
        return error_response(422, "invalid_request", message, missing[0])
    field = _field(tuple(first["loc"]))
    # a union (`q`: string or list) reports one error per branch: say them together
    same_field = list(dict.fromkeys(e["msg"] for e in errors if _field(tuple(e["loc"])) == field))
    message = f"{field}: " + "; or ".join(same_field)
    others = len({_field(tuple(e["loc"])) for e in errors}) - 1
    if others:
        message += f" (and {others} more field(s))"
    return error_response(422, "invalid_request", message, field)


def field_of(exc: EngineError, request: Request) -> str | None:
    """The body's name for what `exc` is about (the route records whether `q` was one string)."""
    return json_path(exc.subject, getattr(request.state, "one_text", False))


async def on_engine_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EngineError)
    status = next((code for kind, code in STATUS.items() if isinstance(exc, kind)), 500)
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Overloaded) else {}
    if isinstance(exc, NotReady):
        headers = {"Retry-After": "1"}
    reason = {Overloaded: "queue_full", NotReady: "not_ready", DeadlineExceeded: "deadline"}.get(type(exc))
    if reason is None and status == 422:
        reason = "invalid"
    if reason is not None:
        request.app.state.metrics.rejections.labels(reason=reason).inc()
    field = field_of(exc, request)
    return error_response(status, exc.code, exc.worded(field), field, exc.limit, headers)


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = HTTP_CODES.get(exc.status_code, "http_error")
    field = "body" if exc.status_code == 400 else None
    message = "the body is not valid JSON (UTF-8)" if exc.status_code == 400 else str(exc.detail)
    return error_response(exc.status_code, code, message, field, headers=dict(exc.headers or {}))


async def on_internal_error(request: Request, exc: Exception) -> JSONResponse:
    """A bug: 500 with the request id to quote, never a traceback or a path. The log line has the
    message and traceback under the same request id, so the id a user quotes leads to the cause."""
    request_id = getattr(request.state, "request_id", None)
    log.error(
        "internal error: %s: %s",
        type(exc).__name__,
        exc,
        exc_info=exc,
        extra={"event": "internal_error", "request_id": request_id, "method": request.method},
    )
    # this answer comes from Starlette's outermost handler, past our middleware: it adds their headers itself
    headers = {k.decode(): v.decode() for k, v in DEFAULT_HEADERS.items()}
    if request_id:
        headers["x-request-id"] = request_id
    return error_response(500, "internal_error", f"internal error; quote request id {request_id}", headers=headers)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(EngineError, on_engine_error)
    app.add_exception_handler(BundleInvalid, on_engine_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_internal_error)
