"""Where a bundle came from: the git commit and the package versions that wrote it."""

from __future__ import annotations

import subprocess
from importlib import metadata

PACKAGES = ("attention-mt", "torch", "onnx", "onnxruntime", "sentencepiece", "transformers")


def git_commit() -> str | None:
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def versions() -> dict[str, str]:
    """Installed versions of the packages that shape a bundle (absent ones are left out)."""
    found = {}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found
