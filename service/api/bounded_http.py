"""httptools, with a bound on what one connection may send before its request head ends, and each
response's head sent with its body (service/api/coalescing.py).

httptools parses a head of any size (a 5 MB header goes through), so the server would hold all of
it before the app's HeaderLimit could answer 431. This protocol counts the bytes that arrive while
a head is unfinished; past the bound it answers 431, closes its side, and reads and drops what
the client still sends: closing with unread bytes would reset the connection, and the client
could lose the 431 it was about to read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.api.coalescing import HeadWithBody
from service.api.security import DEFAULT_HEADERS, error_body, head_bound

log = logging.getLogger("attention_mt.http")
LINGER_S = 5.0


def bounded_httptools(max_header_bytes: int) -> type[HttpToolsProtocol]:
    """An httptools protocol class refusing request heads over the headers' limit (plus room for
    the request line), with the same 431 body as the app's HeaderLimit."""
    max_head_bytes = head_bound(max_header_bytes)
    message = f"the request headers are over {max_header_bytes} bytes"
    body = error_body("headers_too_large", message, "headers", max_header_bytes)
    hardening = b"".join(name + b": " + value + b"\r\n" for name, value in DEFAULT_HEADERS.items())
    response = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
        + hardening
        + b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
        + body
    )

    class BoundedHttpTools(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_bytes = 0
            self._in_head = True
            self._refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(HeadWithBody(transport, self.loop))  # type: ignore[arg-type]

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True

        def on_headers_complete(self) -> None:
            self._in_head, self._head_bytes = False, 0
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # read and dropped: nothing of it is kept
            if self._in_head:
                self._head_bytes += len(data)  # a chunk may hold some body too: a generous count
                if self._head_bytes > max_head_bytes:
                    self._refuse()
                    return
            super().data_received(data)

        def _refuse(self) -> None:
            log.warning("request head over %d bytes refused", max_head_bytes, extra={"event": "head_too_large"})
            self.transport.write(response)
            self._refused = True
            self.transport.write_eof()  # the client reads the 431, then closes; its EOF ends this one
            self.loop.call_later(LINGER_S, self.transport.close)  # a client that never stops sending

    return BoundedHttpTools
