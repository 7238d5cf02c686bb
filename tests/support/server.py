"""A real `attention-mt serve` process on 127.0.0.1 for tests that talk HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RunningServer:
    def __init__(self, bundles: Path, env: dict[str, str] | None = None, ready_timeout: float = 60.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        script = Path(sys.executable).parent / "attention-mt"
        # logs go to a file, not a pipe: an unread pipe fills up and blocks the server's writes
        self.log = tempfile.NamedTemporaryFile(prefix="serve-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(script), "serve", "--port", str(self.port), "--bundles", str(bundles)],
            env={**os.environ, **(env or {})},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become ready")

    def output(self) -> str:
        return Path(self.log.name).read_text(encoding="utf-8", errors="replace")

    def stop(self) -> str:
        """SIGTERM (if still running), wait for the exit, and return everything it logged."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.log.close()
        output = self.output()
        Path(self.log.name).unlink(missing_ok=True)
        return output
