"""What every route needs: the loaded service (or a 503 while loading), and the request's deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import Request

from service.engine.errors import CallerLeft, DeadlineExceeded, NotReady
from service.engine.service import TranslationService

T = TypeVar("T")


def service_of(request: Request) -> TranslationService:
    service: TranslationService | None = request.app.state.service
    if service is None:
        raise NotReady(request.app.state.load_error or "models are loading; retry shortly")
    return service


async def within_deadline(request: Request, timeout_ms: int | None, work: Coroutine[Any, Any, T]) -> T:
    """Await `work` within the request's deadline (the body's timeout_ms, capped by the setting), and
    only while the client is still connected: either way its sentences leave the scheduler's
    batches before the next step, so no compute is spent on an answer nobody reads."""
    limit = request.app.state.settings.request_timeout_s
    seconds = min(limit, timeout_ms / 1000) if timeout_ms else limit
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, gone}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():  # deadline, disconnect, or this handler itself cancelled
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task in done:
        return task.result()
    if gone in done:
        raise CallerLeft("the client disconnected before the answer was ready")
    raise DeadlineExceeded(
        f"the request did not finish within its deadline of {seconds * 1000:.0f} ms",
        field="timeout_ms",
        limit=round(limit * 1000),
    )


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
