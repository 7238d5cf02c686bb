from __future__ import annotations

from pathlib import Path

import pytest

from models.data import CorpusError, Pair, default_corpus_path, read_corpus, split_corpus
from tests.support.synthetic import write_corpus


def sentences(pairs: list[Pair]) -> set[tuple[str, str]]:
    return {("en", p.en) for p in pairs} | {("zh", p.zh) for p in pairs}


def check_disjoint(splits: dict[str, list[Pair]]) -> None:
    names = list(splits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not sentences(splits[a]) & sentences(splits[b]), f"{a} and {b} share a sentence"


def test_read_corpus_normalises_and_keeps_attribution(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_text("Zoe\u0301 runs.\t佐伊跑。\tCC-BY 2.0 (France) Attribution: #1 (a) & #2 (b)\n\t空\tx\n", "utf-8")
    [pair] = read_corpus(path)
    assert pair == Pair("Zoé runs.", "佐伊跑。", "CC-BY 2.0 (France) Attribution: #1 (a) & #2 (b)")


def test_read_corpus_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("Hi.\t嗨。\tok\nno tab here\n", "utf-8")
    with pytest.raises(CorpusError, match=r"bad.tsv:2"):
        read_corpus(path)


def test_missing_corpus_says_where_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTENTION_MT_CORPUS", str(tmp_path / "nope.tsv"))
    with pytest.raises(CorpusError, match="cannot read corpus"):
        read_corpus()
    monkeypatch.setenv("ATTENTION_MT_CORPUS", str(tmp_path / "there.tsv"))
    assert default_corpus_path() == tmp_path / "there.tsv"


def test_linked_pairs_share_a_split() -> None:
    pairs = [
        Pair("Hi.", "嗨。", ""),
        Pair("Hi.", "你好。", ""),  # same English sentence
        Pair("Hello.", "你好。", ""),  # same Chinese sentence as the one above
        Pair("Hello!", "哈喽！", ""),
    ]
    # Whatever split the group lands in, it lands there whole.
    splits = split_corpus(pairs * 1)
    where = {p: name for name, ps in splits.items() for p in ps}
    assert where[pairs[0]] == where[pairs[1]] == where[pairs[2]]


def test_splits_are_disjoint_stable_and_complete(synthetic_corpus: Path) -> None:
    pairs = read_corpus(synthetic_corpus)
    first, second = split_corpus(pairs), split_corpus(list(pairs))
    assert first == second
    assert sum(len(v) for v in first.values()) == len(pairs)
    check_disjoint(first)


def test_splits_survive_new_unrelated_pairs(synthetic_corpus: Path, tmp_path: Path) -> None:
    pairs = read_corpus(synthetic_corpus)
    grown = pairs + [Pair(f"New sentence {i}.", f"新句子{i}。", "") for i in range(50)]
    before, after = split_corpus(pairs), split_corpus(grown)
    for name in before:
        assert set(before[name]) <= set(after[name])


def test_shared_corpus_splits() -> None:
    try:
        path = default_corpus_path()
    except CorpusError:
        pytest.skip("the shared corpus is not on this machine")
    splits = split_corpus(read_corpus(path))
    assert 800 <= len(splits["dev"]) <= 1300
    assert 1200 <= len(splits["test"]) <= 1800
    check_disjoint(splits)
    # and the very same counts on every run and machine
    assert {k: len(v) for k, v in splits.items()} == {"train": 25651, "dev": 1053, "test": 1523}


def test_write_corpus_round_trips(tmp_path: Path) -> None:
    path = write_corpus(tmp_path / "x.tsv", [("A b.", "甲乙。")])
    assert read_corpus(path) == [Pair("A b.", "甲乙。", "synthetic test pair #0")]
