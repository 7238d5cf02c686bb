"""JSON answers serialised by orjson, straight from the presentation's numpy arrays.

Attention matrices stay float32 arrays until orjson writes them (its numpy mode writes a float32
as its shortest decimal), so a payload is never copied through Python floats. Bodies with many
attention cells are shaped and serialised on a worker thread, off the event loop, so one large
answer does not stall every other connection; small ones are cheaper to write in place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import Response

OFF_LOOP_CELLS = 20_000  # about a millisecond of shaping and writing on this machine


class FastJSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def dumps(content: Any) -> bytes:
    return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


async def answer(shape: Callable[[], Any], cells: int) -> FastJSON:
    """The JSON answer of `shape()`; off the event loop when it carries many attention cells."""
    if cells < OFF_LOOP_CELLS:
        return FastJSON(shape())
    return await asyncio.to_thread(lambda: FastJSON(shape()))
