"""A transport that sends a response's head together with its body: one send() where uvicorn makes two.

uvicorn writes a response's status line and headers as soon as the app sends `http.response.start`,
then the body on `http.response.body`: two send() calls, two TCP segments. On loopback and under
load each send() costs the event loop (which holds the GIL through it) a trip through the kernel's
TCP path; the head's write was 9% of the event loop's samples under 32 clients (py-spy). Here a
head is held until the next write, which carries it; a head with no write behind it in the same
turn of the event loop (HEAD, 204, a body that is still being computed) goes out on the next turn,
so nothing is ever held longer than that.
"""

from __future__ import annotations

import asyncio
from typing import Any

HEAD_START = b"HTTP/1."
HEAD_END = b"\r\n\r\n"


class HeadWithBody:
    """Wraps an asyncio transport; every other attribute is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._head: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head + bytes(data))
        elif isinstance(data, bytes) and data.startswith(HEAD_START) and data.endswith(HEAD_END):
            self._head = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
