"""One JSON line per request: `LoggedAccess` through Python's logging (the default: an app in a
test, or embedded, logs as its host configures), `AccessLines` straight onto stderr for `serve`.

Under 32 clients a server without the line at all served 1.09-1.15x the requests a second of one
logging it (side by side, docs/benchmarks.md): a LogRecord, the handler and the formatter ran on the
event loop, the saturated thread, for every request. `AccessLines` makes the same fields with
orjson (1.07x) and writes them in batches: up to PIPE_BUF bytes in one write, at least every
`every_s` seconds, and everything waiting when it is closed (by `serve` once it has drained, and at
exit). Either way the line is on only while the `attention_mt.access` logger is enabled for INFO.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any, BinaryIO, Protocol

import orjson

from service.api.logs import SECONDS_FORMAT

LOGGER = "attention_mt.access"
PIPE_BUF = 4096  # a pipe's writes up to this size are atomic: two workers' lines never interleave
FLUSH_EVERY_S = 0.1  # the longest a line waits to be written


class AccessLog(Protocol):
    def request(self, fields: dict[str, Any]) -> None:
        """Log one request's line: its `event`, `request_id`, `method`, `route`, `status`, `duration_ms`."""
        ...

    def flush(self) -> None:
        """Write every line logged so far (before a process ends without running its exit handlers)."""
        ...


class LoggedAccess:
    """The line as a LogRecord of the `attention_mt.access` logger (logs.JsonFormatter's fields)."""

    def __init__(self) -> None:
        self.log = logging.getLogger(LOGGER)

    def request(self, fields: dict[str, Any]) -> None:
        self.log.info("request", extra=fields)

    def flush(self) -> None:
        pass  # logging's handlers write each line as it comes


class AccessLines:
    """The line made with orjson and written to `stream` in batches, by a lock of its own."""

    def __init__(self, stream: BinaryIO, every_s: float = FLUSH_EVERY_S) -> None:
        self.stream, self.log = stream, logging.getLogger(LOGGER)
        self._lines: list[bytes] = []
        self._size = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._clock = (-1, "")  # (a second, its text): one tuple, so a reader never mixes two seconds
        self._timer = threading.Thread(target=self._every, args=(every_s,), name="access-log", daemon=True)
        self._timer.start()
        atexit.register(self.close)

    def request(self, fields: dict[str, Any]) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        now = time.time()
        line = {"ts": self._ts(now), "level": "info", "logger": LOGGER, "message": "request", "pid": os.getpid()}
        data = orjson.dumps(line | fields, option=orjson.OPT_APPEND_NEWLINE)
        with self._lock:
            if self._size + len(data) > PIPE_BUF:
                self._write()
            self._lines.append(data)
            self._size += len(data)
            if self._closed.is_set():
                self._write()

    def flush(self) -> None:
        with self._lock:
            self._write()

    def close(self) -> None:
        """Write what waits and stop the timer; lines after this are written one by one."""
        self._closed.set()
        self.flush()

    def _ts(self, now: float) -> str:
        """logs.JsonFormatter's timestamp; the part to the second made once a second."""
        second, stamp = self._clock
        if int(now) != second:
            second = int(now)
            stamp = time.strftime(SECONDS_FORMAT, time.gmtime(second))
            self._clock = (second, stamp)
        return f"{stamp}.{int((now - second) * 1000):03d}Z"

    def _every(self, every_s: float) -> None:
        while not self._closed.wait(every_s):
            if self._lines:
                self.flush()

    def _write(self) -> None:
        """Everything waiting, in one write (the caller holds the lock); after `close`, at once."""
        if not self._lines:
            return
        data, self._lines, self._size = b"".join(self._lines), [], 0
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream loses these lines, never a request
            pass
