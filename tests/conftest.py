"""Session fixtures: a synthetic corpus and tokenizers trained on it (seconds, no shared data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.vocab import train_tokenizer
from service.engine.tokenizer import Tokenizer
from tests.support.synthetic import synthetic_pairs, write_corpus

PROJECT_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def synthetic_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "synthetic.tsv")


@pytest.fixture(scope="session")
def en_tokenizer() -> Tokenizer:
    return train_tokenizer([en for en, _ in synthetic_pairs()], "en", vocab_size=60)


@pytest.fixture(scope="session")
def zh_tokenizer() -> Tokenizer:
    return train_tokenizer([zh for _, zh in synthetic_pairs()], "zh", vocab_size=60)
