"""benchmarks.http_bench's CPU split: a process's main thread apart from its other threads, and a
server's worker processes found as its children (Linux's /proc)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks.http_bench import children, thread_cpu

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")


def test_a_busy_thread_counts_as_another_thread_not_the_main_one() -> None:
    spun, measured = threading.Event(), threading.Event()

    def spin() -> None:  # until it has had 0.3 s of CPU itself, however busy the machine is
        start = time.thread_time()
        while time.thread_time() - start < 0.3:
            pass
        spun.set()
        measured.wait()  # alive while counted: an ended thread leaves /proc with its CPU time

    before = thread_cpu([os.getpid()])
    worker = threading.Thread(target=spin)
    worker.start()
    spun.wait()
    after = thread_cpu([os.getpid()])
    measured.set()
    worker.join()
    # the kernel counts in ticks (10 ms): 0.3 s of the thread's CPU shows as at least 0.2 s
    assert after["other_threads"] - before["other_threads"] >= 0.2
    assert after["event_loop"] >= before["event_loop"]  # the main thread's own count never falls


def test_children_are_the_processes_a_process_started() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in children(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_a_process_that_is_gone_gives_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert thread_cpu([child.pid]) == {} and children(child.pid) == []
