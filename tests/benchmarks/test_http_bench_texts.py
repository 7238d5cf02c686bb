"""benchmarks.http_bench's sentences: the test split when the corpus is there, and a fallback that says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.http_bench import FALLBACK_TEXTS, LONG_FALLBACK, long_sentences, sentences
from models.data import read_corpus, split_corpus, split_real_text
from tests.support.synthetic import write_corpus


def test_the_test_split_of_the_corpus_and_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = write_corpus(tmp_path / "pairs.tsv")
    monkeypatch.setenv("ATTENTION_MT_CORPUS", str(corpus))
    chosen = sentences("en", 7)
    test = [p.en for p in split_corpus(read_corpus(corpus))["test"]]
    assert chosen.texts == test[:7] and str(corpus) in chosen.source


def test_no_corpus_gives_the_fixed_sentences_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ATTENTION_MT_CORPUS", str(tmp_path / "missing.tsv"))
    chosen = sentences("en", 6)
    assert chosen.texts == [*FALLBACK_TEXTS, *FALLBACK_TEXTS[:2]]
    assert "fixed sentences" in chosen.source and "fixed sentences" in capsys.readouterr().err


def test_long_sentences_come_from_the_real_text_test_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = [(f"News item {i} says that the council met again on Tuesday.", f"第{i}条新闻。") for i in range(400)]
    real = write_corpus(tmp_path / "real.tsv", pairs)
    monkeypatch.setenv("ATTENTION_MT_REAL_TEXT", str(real))
    chosen = long_sentences("en", 5)
    test = [p.en for p in split_real_text(read_corpus(real))["test"]]
    assert chosen.texts == test[:5] and str(real) in chosen.source
    monkeypatch.setenv("ATTENTION_MT_REAL_TEXT", str(tmp_path / "missing.tsv"))
    assert long_sentences("zh", 3).texts == [*LONG_FALLBACK["zh"], LONG_FALLBACK["zh"][0]]
