"""The image's pinned requirements stay in step with pyproject.toml and with each other."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.conftest import PROJECT_ROOT

REQ = PROJECT_ROOT / "requirements"


def pins(name: str) -> dict[str, str]:
    lines = (REQ / name).read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def declared() -> set[str]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["serve"]
    return {re.split(r"[<>=!\[ ]", s, maxsplit=1)[0].lower() for s in specs}


def test_cpu_pins_cover_the_serve_extra() -> None:
    assert set(pins("serve-cpu.txt")) == declared()


def test_cuda_pins_differ_only_by_onnxruntime_gpu_at_the_same_version() -> None:
    cpu, cuda = pins("serve-cpu.txt"), pins("serve-cuda.txt")
    assert cuda.pop("onnxruntime-gpu") == cpu.pop("onnxruntime")
    assert cpu == cuda


def test_the_gpu_dependency_set_resolves() -> None:
    """Resolve (not install) the CUDA image's dependencies for the image's Python."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            "-",
            "-r",
            str(REQ / "serve-cuda.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"name": "onnxruntime-gpu"' in result.stdout and '"name": "onnxruntime",' not in result.stdout
