"""API keys and per-key rate limits (off by default; on with MT_API_KEYS).

Keys come in the X-API-Key header and are compared in constant time against every configured
key. A key is known inside the service only by its position ("key-1"), so no key ever reaches
a log line or a metric label. Each key has a token bucket of MT_RATE_LIMIT_PER_MINUTE requests;
an empty bucket answers 429 with Retry-After, and other keys are unaffected.
"""

from __future__ import annotations

import hmac
import json
import math
import time

from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = {"/livez", "/readyz", "/metrics"}


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


class ApiKeyAuth:
    def __init__(self, app: ASGIApp, keys: tuple[str, ...], per_minute: int) -> None:
        self.app = app
        self.keys = [k.encode() for k in keys]
        self.buckets = {f"key-{i + 1}": TokenBucket(per_minute) for i in range(len(keys))} if per_minute else {}

    def identify(self, given: bytes) -> str | None:
        match = None
        for i, key in enumerate(self.keys):  # every key is compared: the time does not say which matched
            if hmac.compare_digest(given, key):
                match = f"key-{i + 1}"
        return match

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-api-key", b"")
        key_id = self.identify(given)
        if key_id is None:
            await _answer(send, 401, "unauthorized", "a valid X-API-Key header is required", {})
            return
        bucket = self.buckets.get(key_id)
        wait = bucket.take() if bucket else 0.0
        if wait > 0:
            retry = str(math.ceil(wait))
            await _answer(
                send,
                429,
                "rate_limited",
                f"rate limit reached for this key; retry in {retry} s",
                {"retry-after": retry},
                limit=int(bucket.capacity) if bucket else None,
            )
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
