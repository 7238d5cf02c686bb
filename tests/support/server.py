"""A real `attention-mt serve` process on 127.0.0.1 for tests that talk HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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
        self.proc = subprocess.Popen(
            [str(script), "serve", "--port", str(self.port), "--bundles", str(bundles)],
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.communicate()[0]}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become ready")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        output, _ = self.proc.communicate(timeout=30)
        return output
