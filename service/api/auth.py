"""API keys and per-key rate limits (off by default; on with MT_API_KEYS).

Keys come in the X-API-Key header (the LibreTranslate routes also take an `api_key` field, which
the route itself checks with the same key ring) and are compared in constant time against every configured
key. A key is known inside the service only by its position ("key-1"), so no key ever reaches
a log line or a metric label. Each key has a token bucket of MT_RATE_LIMIT_PER_MINUTE requests;
an empty bucket answers 429 with Retry-After, and other keys are unaffected.

The page, its assets and the API docs are served without a key (a browser cannot add a header to
a page load); the page asks for a key when the API answers 401 and sends it with every call.
"""

from __future__ import annotations

import hmac
import json
import math
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = {"/livez", "/readyz", "/metrics", "/", "/docs", "/redoc", "/openapi.json"}
OPEN_PREFIXES = ("/static/", "/docs-assets/")  # mounted file servers: nothing under them reaches a route
BODY_KEY_PATHS = {"/translate", "/detect", "/languages"}  # LibreTranslate clients send `api_key` in the body


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str
    headers: dict[str, str]
    limit: int | None = None


class TokenBucket:
    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.tokens = float(per_minute)
        self.rate = per_minute / 60.0
        self.updated = time.monotonic()

    def take(self) -> float:
        """0 when a request may go now, else the seconds until one may."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class KeyRing:
    """The configured keys and each key's bucket; `check` says whether a key may make a request now."""

    def __init__(self, keys: tuple[str, ...], per_minute: int) -> None:
        self.keys = [k.encode() for k in keys]
        self.buckets = {f"key-{i + 1}": TokenBucket(per_minute) for i in range(len(keys))} if per_minute else {}

    @property
    def on(self) -> bool:
        return bool(self.keys)

    def identify(self, given: bytes) -> str | None:
        match = None
        for i, key in enumerate(self.keys):  # every key is compared: the time does not say which matched
            if hmac.compare_digest(given, key):
                match = f"key-{i + 1}"
        return match

    def check(self, given: bytes, how: str = "a valid X-API-Key header") -> tuple[str | None, Refusal | None]:
        """(key id, None) when the key may go now; (None, why not) otherwise."""
        key_id = self.identify(given)
        if key_id is None:
            return None, Refusal(401, "unauthorized", f"{how} is required", {})
        bucket = self.buckets.get(key_id)
        wait = bucket.take() if bucket else 0.0
        if wait > 0 and bucket is not None:
            retry = str(math.ceil(wait))
            message = f"rate limit reached for this key; retry in {retry} s"
            return None, Refusal(429, "rate_limited", message, {"retry-after": retry}, int(bucket.capacity))
        return key_id, None


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class ApiKeyAuth:
    def __init__(self, app: ASGIApp, ring: KeyRing) -> None:
        self.app, self.ring = app, ring

    def identify(self, given: bytes) -> str | None:
        return self.ring.identify(given)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.ring.on or is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-api-key")
        if given is None and scope["path"] in BODY_KEY_PATHS:
            await self.app(scope, receive, send)  # the route checks the body's api_key with the same ring
            return
        key_id, refusal = self.ring.check(given or b"")
        if refusal is not None:
            await _answer(send, refusal.status, refusal.code, refusal.message, refusal.headers, refusal.limit)
            return
        scope.setdefault("state", {})["api_key_id"] = key_id
        await self.app(scope, receive, send)


async def _answer(
    send: Send, status: int, code: str, message: str, headers: dict[str, str], limit: int | None = None
) -> None:
    body = json.dumps({"error": {"code": code, "message": message, "field": None, "limit": limit}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
