"""The request's access line (service/api/access_log.py). `AccessLines`, which `serve` uses: the
same fields as a line through logging; every line written, in order, whole, in writes no larger
than a pipe writes atomically; within the flush interval, and all of them when closed; a broken
stream never fails a request; off while the access logger is off for INFO; a process's lines are
all on stderr when it exits (over real servers: test_reliability's log test, and test_workers, which
counts every request's line of two workers after a drain). Request ids are new every time. Waits are
on events, joins and process exits, never on sleeps."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from service.api.access_log import LOGGER, PIPE_BUF, AccessLines
from service.api.logs import JsonFormatter
from service.api.middleware import RequestIds

NEVER_S = 3600.0  # a flush interval no test waits for
FIELDS = {"event": "request", "request_id": "r-1", "method": "POST", "route": "/v1/translate", "status": 200}


class Recorded(io.BytesIO):
    """A binary stream that keeps each write and says when one happened."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.wrote = threading.Event()

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.writes.append(bytes(data))
        self.wrote.set()
        return super().write(data)


@pytest.fixture
def lines_to() -> Iterator[list[AccessLines]]:
    """AccessLines made by a test, closed after it; the access logger on for INFO, as `serve` has it."""
    made: list[AccessLines] = []
    logger = logging.getLogger(LOGGER)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield made
    for access in made:
        access.close()
    logger.setLevel(level)


def access_lines(made: list[AccessLines], stream: io.BytesIO, every_s: float = NEVER_S) -> AccessLines:
    made.append(AccessLines(stream, every_s))
    return made[-1]


def lines(stream: io.BytesIO) -> list[dict[str, object]]:
    data = stream.getvalue()
    assert data.endswith(b"\n") or not data  # whole lines only
    return [json.loads(line) for line in data.splitlines()]


def test_the_line_has_the_fields_a_logged_one_has(lines_to: list[AccessLines]) -> None:
    stream = Recorded()
    access = access_lines(lines_to, stream)
    access.request({**FIELDS, "duration_ms": 5.21})
    access.close()
    [line] = lines(stream)
    record = logging.LogRecord(LOGGER, logging.INFO, __file__, 1, "request", None, None)
    record.__dict__.update({**FIELDS, "duration_ms": 5.21})
    logged = json.loads(JsonFormatter().format(record))
    assert line.keys() == logged.keys()
    assert {k: v for k, v in line.items() if k != "ts"} == {k: v for k, v in logged.items() if k != "ts"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(line["ts"]))


def test_every_line_is_written_in_order_in_whole_atomic_writes(lines_to: list[AccessLines]) -> None:
    stream = Recorded()
    access = access_lines(lines_to, stream)

    def log_from(thread: int) -> None:
        for i in range(500):
            access.request({**FIELDS, "request_id": f"t{thread}", "status": i})

    threads = [threading.Thread(target=log_from, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stream.writes) < 2000 // 10  # batched, before any closing
    access.close()
    written = lines(stream)
    assert len(written) == 2000
    for t in range(4):  # each thread's lines in the order it logged them
        assert [line["status"] for line in written if line["request_id"] == f"t{t}"] == list(range(500))
    assert all(len(w) <= PIPE_BUF and w.endswith(b"\n") for w in stream.writes)


def test_a_line_is_written_within_the_interval_and_at_once_after_closing(lines_to: list[AccessLines]) -> None:
    stream = Recorded()
    access = access_lines(lines_to, stream, every_s=0.05)
    access.request(FIELDS)
    assert stream.wrote.wait(timeout=30)  # the interval is 0.05 s; the bound only catches a hang
    assert len(lines(stream)) == 1
    access.close()
    access.request(FIELDS)
    assert len(lines(stream)) == 2  # written by the call itself


class Breaks(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise OSError("pipe gone")


def test_a_broken_stream_never_fails_the_request(lines_to: list[AccessLines]) -> None:
    access = access_lines(lines_to, Breaks())
    for _ in range(100):  # past PIPE_BUF: written (and lost) by the caller's own call
        access.request(FIELDS)
    access.close()


def test_no_line_while_the_access_logger_is_off(lines_to: list[AccessLines]) -> None:
    stream = Recorded()
    access = access_lines(lines_to, stream)
    logging.getLogger(LOGGER).setLevel(logging.WARNING)  # the fixture puts it back
    access.request(FIELDS)
    access.close()
    assert stream.getvalue() == b""


def test_request_ids_are_new_every_time_and_shaped_as_before() -> None:
    ids = RequestIds()
    made = [ids.next() for _ in range(10_000)]
    assert len(set(made)) == len(made) and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in made)
    assert RequestIds().next()[:16] != ids.next()[:16]  # another process's (or app's) prefix


def test_a_process_that_exits_writes_every_line() -> None:
    code = (
        "import logging, sys\n"
        "from service.api.access_log import AccessLines\n"
        "logging.getLogger('attention_mt.access').setLevel('INFO')\n"
        "access = AccessLines(sys.stderr.buffer)\n"
        "for i in range(300): access.request({'event': 'request', 'status': i})\n"
        "raise SystemExit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert done.returncode == 3
    assert [json.loads(line)["status"] for line in done.stderr.splitlines()] == list(range(300))
