"""`serve` as several worker processes on one listening socket (MT_WORKERS).

In one process the event loop and the inference thread take turns holding the interpreter's lock:
on 2 cores one server used 1.3 of them under load (docs/benchmarks.md). N worker processes each
run the whole service (their own models, scheduler and drain), each listening on the same port
(SO_REUSEPORT); the kernel spreads connections over them. The parent only supervises:

- SIGTERM and SIGINT go to every worker, which drains as a lone server would (readyz 503, the
  settle window, then in-flight work finishes); the parent exits 0 when all of them did.
- A worker that ends on its own (a load failure exits 3, a broken scheduler 4) takes the others
  down with it, and the parent exits with its code: an orchestrator sees what one process shows.
- Metrics add up across workers through prometheus_client's multiprocess mode, in a directory the
  parent creates and removes.

Workers are started with "spawn" (a fresh interpreter each; no threads forked) and in a process
group of their own, so a terminal's Ctrl-C reaches them once, through the parent.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import tempfile
from collections.abc import Sequence
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

from service.settings import Settings

log = logging.getLogger("attention_mt")
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client reads it when first imported
BACKLOG = 2048  # uvicorn's own


class PortTaken(Exception):
    pass


def serve_workers(settings: Settings, graceful_timeout: int) -> int:
    """Run settings.workers workers until they end; the exit code the service should end with."""
    try:
        return _serve_workers(settings, graceful_timeout)
    except PortTaken as exc:
        log.error("%s", exc, extra={"event": "bind_failed"})
        return 1


def _serve_workers(settings: Settings, graceful_timeout: int) -> int:
    _check_port(settings)
    with tempfile.TemporaryDirectory(prefix="attention-mt-metrics-") as metrics_dir:
        os.environ[METRICS_DIR] = metrics_dir  # inherited by every worker
        context = multiprocessing.get_context("spawn")
        workers = [
            context.Process(target=_worker, args=(settings, graceful_timeout), name=f"worker-{i + 1}")
            for i in range(settings.workers)
        ]
        for worker in workers:
            worker.start()
        return _supervise(workers)


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening socket of this worker's own on a port the others share (SO_REUSEPORT): the kernel
    spreads new connections evenly over the workers. One socket shared by all was measured uneven:
    the worker that woke first accepted most of a burst of connections and kept them (keep-alive)."""
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def _check_port(settings: Settings) -> None:
    """A port another program holds (another server sharing it with SO_REUSEPORT included, which
    would otherwise split its traffic with this one) fails here, once, with the reason."""
    with socket.socket(_family(settings.host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT left by a restart is fine
        try:
            sock.bind((settings.host, settings.port))
        except OSError as exc:
            raise PortTaken(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}") from exc


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _worker(settings: Settings, graceful_timeout: int) -> None:
    from cli.serve_cmd import run_service

    os.setpgrp()  # signals come from the parent only
    raise SystemExit(run_service(settings, graceful_timeout, [listening_socket(settings.host, settings.port)]))


def _supervise(workers: Sequence[BaseProcess]) -> int:
    stopping = False

    def forward(sig: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers:
            if worker.pid is not None and worker.exitcode is None:
                os.kill(worker.pid, sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    code = 0
    while live := [w for w in workers if w.exitcode is None]:
        wait([w.sentinel for w in live])
        for worker in live:
            if worker.exitcode is None:
                continue
            _forget(worker)
            if worker.exitcode != 0 and not code:
                code = worker.exitcode if worker.exitcode > 0 else 1  # killed by a signal: 1
            if not stopping:  # a worker ended on its own: the service cannot go on as configured
                log.error("%s ended (exit %s); stopping the others", worker.name, worker.exitcode,
                          extra={"event": "worker_ended"})  # fmt: skip
                code = code or 1
                forward(signal.SIGTERM, None)
    return code


def _forget(worker: BaseProcess) -> None:
    """Drop a finished worker's live gauges (the queue depth) from the metrics' sum."""
    from prometheus_client import multiprocess

    if worker.pid is not None:
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
