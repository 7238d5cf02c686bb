"""ASGI middleware: JSON-only bodies under a size limit (415, 413), and the request context
(request id, metrics by route and status, one JSON log line per request)."""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.access_log import AccessLog
from service.api.metrics import Metrics

SAFE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
KNOWN_ROUTES = {"/v1/translate", "/v1/attention", "/v1/models", "/livez", "/readyz", "/metrics", "/"}


JSON_MEDIA = frozenset({b"application/json"})
FORM_MEDIA = JSON_MEDIA | {b"application/x-www-form-urlencoded"}
FORM_PATHS = frozenset({"/translate", "/detect", "/languages"})  # LibreTranslate's clients send forms


class BodyLimit:
    """Refuse bodies over `max_bytes` with 413 before any handler parses them."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def _refuse(self, send: Send) -> None:
        await self._send(send, 413, "payload_too_large", f"the body is over {self.max_bytes} bytes", self.max_bytes)

    @staticmethod
    async def _send(send: Send, status: int, code: str, message: str, limit: int | None = None) -> None:
        body = {"error": {"code": code, "message": message, "field": "body", "limit": limit}}
        data = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        media_type = headers.get(b"content-type", b"application/json").split(b";")[0].strip().lower()
        allowed = FORM_MEDIA if scope["path"] in FORM_PATHS else JSON_MEDIA
        if media_type not in allowed:
            kinds = "JSON or a form (application/x-www-form-urlencoded)" if len(allowed) > 1 else "JSON"
            await self._send(send, 415, "unsupported_media_type", f"send the body as {kinds}")
            return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        chunks, size, more = [], 0, True
        while more:  # read it all (bounded) so a lying or missing content-length cannot get past
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class RequestIds:
    """New request ids: a random prefix of the process (renewed in a forked child) and a count.
    uuid4 read the kernel's random source for every request, a system call that lets go of the
    interpreter lock, which the event loop then waits to get back under load; an id need only be
    unique, not secret."""

    def __init__(self) -> None:
        self._renew()
        os.register_at_fork(after_in_child=self._renew)

    def _renew(self) -> None:
        self._prefix, self._count = os.urandom(8).hex(), itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._count):016x}"  # 32 hex digits, as uuid4().hex


REQUEST_IDS = RequestIds()  # one a process: ids never repeat across the apps it builds


class RequestContext:
    """A request id for every request (the client's X-Request-ID if sane, else a new one), echoed in
    the response, counted in metrics by route and status, and logged as one JSON line that never
    holds the request's text or keys."""

    def __init__(self, app: ASGIApp, metrics: Metrics, access: AccessLog) -> None:
        self.app, self.metrics, self.access = app, metrics, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if SAFE_ID.fullmatch(given) else REQUEST_IDS.next()
        scope.setdefault("state", {})["request_id"] = request_id
        path = scope["path"]
        route = "/v1/models/{name}" if path.startswith("/v1/models/") else path if path in KNOWN_ROUTES else "other"
        status: dict[str, Any] = {"code": 500}
        started = time.perf_counter()

        async def tagged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, tagged_send)
        finally:
            self.metrics.requests.labels(route, str(status["code"])).inc()
            self.metrics.after_request()
            self.access.request(
                {
                    "event": "request",
                    "request_id": request_id,
                    "method": scope["method"],
                    "route": route,
                    "status": status["code"],
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                }
            )
