"""`attention-mt serve`: uvicorn with a drain that drops nothing.

On SIGTERM: /readyz answers 503 at once, but the server keeps accepting and serving for a settle
window (MT_DRAIN_SETTLE_S), the time a load balancer or Kubernetes needs to stop sending; only
then does it stop accepting, finish everything in flight within the graceful timeout, and exit 0.
A second signal skips the window. Without the window, a connection the kernel had already
accepted but the server had not would be reset.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from service.api.bounded_http import bounded_httptools
from service.settings import Settings


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI, settle_s: float) -> None:
        super().__init__(config)
        self.app, self.settle_s = app, settle_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        first = not self.app.state.draining
        self.app.state.draining = True  # /readyz answers 503 from the first signal on
        if first and self.settle_s > 0 and sig == signal.SIGTERM:
            timer = threading.Timer(self.settle_s, self._stop_accepting, args=(sig, frame))
            timer.daemon = True
            timer.start()
            return
        self._stop_accepting(sig, frame)

    def _stop_accepting(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            # uvicorn re-raises the signal after its shutdown, which would end the process as
            # "killed by SIGTERM"; a drain that finished its work exits 0 instead.
            self._captured_signals = [s for s in self._captured_signals if s != signal.SIGTERM]


def run_service(settings: Settings, graceful_timeout: int, sockets: list[socket.socket] | None = None) -> int:
    """Load, serve until a signal, drain; the exit code (0, or SCHEDULER_FAILURE_EXIT_CODE; a load
    failure ends the process with LOAD_FAILURE_EXIT_CODE before this returns). `sockets`: listening
    sockets to serve (a worker's own on a shared port, cli/workers.py) instead of binding host:port."""
    from cli.gc_tuning import tune_gc
    from service.api.access_log import AccessLines
    from service.api.app import SCHEDULER_FAILURE_EXIT_CODE, create_app
    from service.api.logs import configure_logging

    log_config = configure_logging()
    access = AccessLines(sys.stderr.buffer)  # not through logging: 32 clients got 1.07x the throughput
    app = create_app(
        settings,
        exit_on_load_failure=True,
        on_ready=lambda: tune_gc(settings.gc_freeze, settings.gc_thresholds),
        access_log=access,
    )
    config = uvicorn_config(app, settings, graceful_timeout, log_config)
    DrainingServer(config, app, settings.drain_settle_s).run(sockets=sockets)
    access.close()  # here, not only at exit: a worker process ends with os._exit, which skips atexit
    return SCHEDULER_FAILURE_EXIT_CODE if app.state.fatal else 0  # a broken scheduler drained; say so


def uvicorn_config(
    app: FastAPI, settings: Settings, graceful_timeout: int, log_config: dict[str, Any]
) -> uvicorn.Config:
    limit = settings.max_header_bytes
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        timeout_graceful_shutdown=graceful_timeout,
        loop="uvloop",  # with httptools: a third of the HTTP path's cost at batch 1 (docs/benchmarks.md)
        http=bounded_httptools(limit),  # httptools, refusing heads over the bound
        server_header=False,
        log_config=log_config,
        access_log=False,  # one JSON line per request comes from the app, with its request id
    )
