"""The serving image, built from the Dockerfile with podman (../shared/tools/container), and a
container of it serving the test bundles on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIGURES, PROJECT_ROOT
from tests.support.server import free_port

CONTAINER = PROJECT_ROOT.parent / "shared" / "tools" / "container"
AVAILABLE = shutil.which("podman") is not None and CONTAINER.exists()
if not AVAILABLE and os.environ.get("CI"):
    raise RuntimeError("CI must run ../shared/tools/container-setup first (see .ci/run)")
IMAGE = "attention-mt:test"


def container(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONTAINER), *args], capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class Running:
    name: str
    url: str
    ready_seconds: float


def wait_ready(url: str, timeout: float = 120.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} never became ready")


@pytest.fixture(scope="session")
def image() -> str:
    if not AVAILABLE:
        pytest.skip("podman and ../shared/tools/container are not here (run ../shared/tools/container-setup)")
    start = time.monotonic()
    result = container("build", "--format", "docker", "-t", IMAGE, str(PROJECT_ROOT))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    FIGURES["image build seconds"] = round(time.monotonic() - start, 1)
    size = container("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout.strip()
    FIGURES["image size MB"] = round(int(size) / 1e6, 1)
    return IMAGE


@pytest.fixture(scope="session")
def readable_bundles(bundle_dir: Path, converted_bundles: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test bundles, and a converted Marian one (en-de), where the image's non-root user can read them."""
    root = tmp_path_factory.mktemp("container-bundles")
    target = root / "bundles"
    shutil.copytree(bundle_dir, target)
    shutil.copytree(converted_bundles / "en-de", target / "en-de")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def start(image: str, bundles: Path, name: str, *options: str) -> Running:
    """`options`: more `run` flags (environment, mounts) before the image."""
    port = free_port()
    container("rm", "-f", name)
    result = container(
        "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000", "-v", f"{bundles}:/app/bundles:ro", *options, image
    )
    assert result.returncode == 0, result.stderr
    url = f"http://127.0.0.1:{port}"
    return Running(name, url, wait_ready(url))


@pytest.fixture(scope="session")
def served(image: str, readable_bundles: Path) -> Iterator[Running]:
    running = start(image, readable_bundles, f"amt-test-{os.getpid()}")
    FIGURES["container cold start to ready s"] = round(running.ready_seconds, 2)
    yield running
    container("rm", "-f", running.name)
