"""The corpus: reading the Tatoeba TSV and carving deterministic train/dev/test splits.

Splits are decided per connected group of pairs: every translation of one English sentence,
and every pair that shares a Chinese sentence, land in the same split, so no sentence of dev or
test is ever seen in training. A group's split comes from a hash of its smallest English
sentence, so it is stable across runs and machines, and mostly stable as the corpus grows.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from service.engine.text import normalize

CORPUS_ENV = "ATTENTION_MT_CORPUS"
_SHARED_CORPUS = Path("shared/data/tatoeba-cmn-eng/cmn-eng.tsv")
# Fractions of the hash space; on the 28k-pair corpus they give about 1,000 dev and 1,500 test pairs.
DEV_FRACTION = 0.036
TEST_FRACTION = 0.053
SPLITS = ("train", "dev", "test")

# The real-text pairs (news and health, ../shared/data/news-zh-en): a held-out test set of about
# 1,000 pairs and a dev set of about 500 to choose search settings on; the rest may be trained on.
REAL_TEXT_ENV = "ATTENTION_MT_REAL_TEXT"
_SHARED_REAL_TEXT = Path("shared/data/news-zh-en/news-zh-en.tsv")
REAL_TEXT_FRACTIONS = (0.0275, 0.055)  # dev, test: about 500 and 1,000 of 18,230
REAL_TEXT_SALT = "news:"


class CorpusError(ValueError):
    """A corpus that cannot be found or read."""


@dataclass(frozen=True)
class Pair:
    en: str
    zh: str
    attribution: str

    def text(self, lang: str) -> str:
        return self.en if lang == "en" else self.zh


def _shared(env: str, relative: Path) -> Path | None:
    if value := os.environ.get(env):
        return Path(value)
    project_root = Path(__file__).resolve().parents[1]
    for base in (project_root.parent, Path.cwd().parent, Path.cwd()):
        if (base / relative).is_file():
            return base / relative
    return None


def default_corpus_path() -> Path:
    """The corpus path: $ATTENTION_MT_CORPUS, else ../shared/... beside the checkout or the cwd."""
    found = _shared(CORPUS_ENV, _SHARED_CORPUS)
    if found is None:
        raise CorpusError(
            f"no corpus found: set {CORPUS_ENV} or pass --corpus; expected ../{_SHARED_CORPUS} beside the project "
            "(get cmn-eng.tsv from https://www.manythings.org/anki/ or tatoeba.org; see README)"
        )
    return found


def default_real_text_path() -> Path:
    """The real-text pairs: $ATTENTION_MT_REAL_TEXT, else ../shared/data/news-zh-en/news-zh-en.tsv."""
    found = _shared(REAL_TEXT_ENV, _SHARED_REAL_TEXT)
    if found is None:
        raise CorpusError(f"no real-text pairs found: set {REAL_TEXT_ENV}; expected ../{_SHARED_REAL_TEXT}")
    return found


def read_corpus(path: str | Path | None = None) -> list[Pair]:
    """Read `English<TAB>Chinese<TAB>attribution` lines, NFC-normalised; blank pairs are skipped."""
    path = Path(path) if path else default_corpus_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc}") from exc
    pairs = []
    for number, line in enumerate(lines, start=1):
        cols = line.split("\t")
        if len(cols) < 2:
            raise CorpusError(f"{path}:{number}: expected English<TAB>Chinese<TAB>attribution")
        en, zh = normalize(cols[0]), normalize(cols[1])
        if en and zh:
            pairs.append(Pair(en, zh, cols[2].strip() if len(cols) > 2 else ""))
    return pairs


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _groups(pairs: list[Pair]) -> list[list[int]]:
    """Connected components of pairs linked by a shared English or Chinese sentence (union-find)."""
    parent = list(range(len(pairs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_seen: dict[tuple[str, str], int] = {}
    for i, pair in enumerate(pairs):
        for key in (("en", pair.en), ("zh", pair.zh)):
            j = first_seen.setdefault(key, i)
            parent[find(i)] = find(j)
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(len(pairs)):
        members[find(i)].append(i)
    return list(members.values())


def split_of(key: str, dev: float = DEV_FRACTION, test: float = TEST_FRACTION) -> str:
    """The split a group goes to, from a hash of its key."""
    bucket = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) / 2**32
    if bucket < dev:
        return "dev"
    if bucket < dev + test:
        return "test"
    return "train"


def split_corpus(
    pairs: list[Pair], fractions: tuple[float, float] = (DEV_FRACTION, TEST_FRACTION), salt: str = ""
) -> dict[str, list[Pair]]:
    """Deterministic train/dev/test splits; pairs keep their corpus order within a split."""
    assignment: dict[int, str] = {}
    for group in _groups(pairs):
        split = split_of(salt + min(pairs[i].en for i in group), *fractions)
        for i in group:
            assignment[i] = split
    return {name: [p for i, p in enumerate(pairs) if assignment[i] == name] for name in SPLITS}


def split_real_text(pairs: list[Pair]) -> dict[str, list[Pair]]:
    """The real-text pairs' splits: about 500 dev and 1,000 test pairs, held out from training."""
    return split_corpus(pairs, REAL_TEXT_FRACTIONS, REAL_TEXT_SALT)
