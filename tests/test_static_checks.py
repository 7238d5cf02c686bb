"""The suite enforces the project's style gates, so the one test command is the whole of CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize("command", [("ruff", "check", "."), ("ruff", "format", "--check", ".")], ids=" ".join)
def test_ruff(command: tuple[str, ...]) -> None:
    result = run(str(BIN / command[0]), *command[1:])
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = run(str(BIN / "mypy"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_engine_imports_without_torch() -> None:
    code = (
        "import sys, service.engine.search, service.engine.tokenizer, service.engine.text, service.api.app,"
        " cli.translate_cmd;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'models', 'export')];"
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_service_source_never_imports_the_training_side() -> None:
    offenders = []
    for path in (PROJECT_ROOT / "service").rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            words = line.strip().split()
            banned = ("torch", "transformers", "models", "export")
            if words[:1] in (["import"], ["from"]) and words[1].split(".")[0] in banned:
                offenders.append(f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}")
    assert not offenders
