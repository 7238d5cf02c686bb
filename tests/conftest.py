"""Session fixtures: a synthetic corpus and tokenizers trained on it (seconds, no shared data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from models.vocab import train_tokenizer
from service.engine.tokenizer import Tokenizer
from tests.support.synthetic import synthetic_pairs, write_corpus

PROJECT_ROOT = Path(__file__).resolve().parents[1]
FIGURES: dict[str, object] = {}  # measured figures, printed at the end of the run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("figures")
        for key, value in FIGURES.items():
            terminalreporter.write_line(f"{key}: {value}")


@pytest.fixture(scope="session")
def synthetic_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "synthetic.tsv")


@pytest.fixture(scope="session")
def en_tokenizer() -> Tokenizer:
    return train_tokenizer([en for en, _ in synthetic_pairs()], "en", vocab_size=60)


@pytest.fixture(scope="session")
def zh_tokenizer() -> Tokenizer:
    return train_tokenizer([zh for _, zh in synthetic_pairs()], "zh", vocab_size=60)


TINY_CONFIG = PROJECT_ROOT / "models" / "configs" / "tiny.toml"


def cli(*args: str | Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run the installed `attention-mt` console script (or the module when not installed)."""
    script = Path(sys.executable).parent / "attention-mt"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def trained_tiny_run(tmp_path_factory: pytest.TempPathFactory, synthetic_corpus: Path) -> Path:
    """A tiny Transformer trained on the synthetic corpus long enough to translate it (seconds).

    Tests must not write into it: copy it first."""
    run = tmp_path_factory.mktemp("trained") / "tiny"
    result = cli("train", TINY_CONFIG, "--out", run, "--corpus", synthetic_corpus, "--epochs", "12")
    assert result.returncode == 0, result.stderr
    return run


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory, trained_tiny_run: Path) -> Path:
    """A bundle directory like the repo's: `en-zh` (fp32, the pair's default) and `en-zh-int8`."""
    from export.pipeline import ExportOptions, export_run

    root = tmp_path_factory.mktemp("bundles")
    export_run(trained_tiny_run, root / "en-zh", ExportOptions(quality_beams=(1,)))
    export_run(trained_tiny_run, root / "en-zh-int8", ExportOptions(quantize="int8", quality_split=None))
    return root
