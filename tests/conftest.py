"""Session fixtures: a synthetic corpus and tokenizers trained on it (seconds, no shared data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from models.vocab import train_tokenizer
from service.engine.tokenizer import Tokenizer
from tests.support.marian import ENGLISH_CHINESE, ENGLISH_GERMAN, build_marian, write_sample
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


@pytest.fixture(scope="session")
def marian_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two small trained Hugging Face Marian checkpoints (seconds each; tests copy before changing):
    `en-de` post-norm, swish, a shared vocabulary, the target token >>deu<<; `en-zh` GELU, separate
    vocabularies, an untied output layer, no embedding scale, length penalty 1.2."""
    root = tmp_path_factory.mktemp("marian")
    return {
        "en-de": build_marian(ENGLISH_GERMAN, root / "opus-mt-en-de"),
        "en-zh": build_marian(ENGLISH_CHINESE, root / "opus-mt-en-zh"),
    }


@pytest.fixture(scope="session")
def english_chinese_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pairs = synthetic_pairs()[::5]  # 90 pairs, every name and verb
    return write_sample(tmp_path_factory.mktemp("sample") / "en-zh.tsv", pairs)


@pytest.fixture(scope="session")
def converted_bundles(
    tmp_path_factory: pytest.TempPathFactory, marian_checkpoints: dict[str, Path], english_chinese_sample: Path
) -> Path:
    """Both checkpoints converted at fp32: `en-de` (no sample: made-up parity sentences, the default
    view) and `marian-en-zh` (with a parallel sample: its view chosen by name alignment)."""
    from export.convert_hf import ConvertOptions, convert_hf

    root = tmp_path_factory.mktemp("converted")
    convert_hf(marian_checkpoints["en-de"], root / "en-de", ConvertOptions("en", "de", target_token=">>deu<<"))
    options = ConvertOptions("en", "zh", align_sample=english_chinese_sample)
    convert_hf(marian_checkpoints["en-zh"], root / "marian-en-zh", options)
    return root
