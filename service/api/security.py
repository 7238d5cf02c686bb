"""Security hygiene at the edge: response headers (CSP, nosniff, no framing) and a bound on
request headers (431).

The page's policy allows only the service's own scripts, styles and fetches: the page has no
inline script or style. /docs and /redoc set their own, looser policy (see service/api/docs.py);
a response that brings its own Content-Security-Policy keeps it.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
DEFAULT_HEADERS = {
    b"content-security-policy": PAGE_POLICY.encode(),
    b"x-content-type-options": b"nosniff",
    b"x-frame-options": b"DENY",  # frame-ancestors 'none' for browsers that predate it
    b"referrer-policy": b"no-referrer",
}
REQUEST_LINE_ROOM = 8 * 1024  # the connection-level bound covers the request line too


def docs_policy(nonce: str) -> str:
    """Swagger UI and ReDoc: their one inline script runs by nonce; their styles are injected at
    run time (so 'unsafe-inline' for styles only), and ReDoc's search runs in a blob: worker."""
    return (
        f"default-src 'none'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def error_body(code: str, message: str, field: str | None, limit: int | None) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "field": field, "limit": limit}}).encode()


class SecurityHeaders:
    """Adds DEFAULT_HEADERS to every HTTP response that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(k, v) for k, v in DEFAULT_HEADERS.items() if k not in present]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def header_bytes(headers: list[tuple[bytes, bytes]]) -> int:
    """Header bytes as on the wire: `name: value\\r\\n` each."""
    return sum(len(name) + len(value) + 4 for name, value in headers)


class HeaderLimit:
    """Refuses requests whose headers are over `max_bytes` with 431, whatever the HTTP server:
    httptools takes a head of any size, and h11 bounds only an unfinished one."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or header_bytes(scope["headers"]) <= self.max_bytes:
            await self.app(scope, receive, send)
            return
        message = f"the request headers are over {self.max_bytes} bytes"
        data = error_body("headers_too_large", message, "headers", self.max_bytes)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": 431, "headers": headers})
        await send({"type": "http.response.body", "body": data})


def head_bound(max_header_bytes: int) -> int:
    """What a connection may send of an unfinished head (its request line too) before the server
    refuses it (service/api/bounded_http.py); HeaderLimit answers 431 for complete heads below it."""
    return max_header_bytes + REQUEST_LINE_ROOM
