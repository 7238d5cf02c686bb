"""The sentences a conversion checks itself on: the user's parallel sample, or made-up ones.

`--align-sample` is a small TSV of `source<TAB>target` pairs (more columns are ignored). Without
one, sources are strung together from the source SentencePiece model's own word pieces: nonsense,
but real tokens in varied lengths, which is what parity of the computation needs.
"""

from __future__ import annotations

import random
from pathlib import Path

import sentencepiece as spm

from export.marian_checkpoint import ConversionError

Pair = tuple[str, str]


def read_sample(path: Path) -> list[Pair]:
    """Non-blank lines of a `source<TAB>target` file, in order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConversionError([f"--align-sample {path}: cannot read it as UTF-8 text ({exc})"]) from exc
    pairs, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) < 2 or not columns[0].strip() or not columns[1].strip():
            problems.append(f"--align-sample {path.name} line {number}: expected source<TAB>target")
        else:
            pairs.append((columns[0].strip(), columns[1].strip()))
    if problems:
        raise ConversionError(problems[:5])
    if not pairs:
        raise ConversionError([f"--align-sample {path.name}: no sentence pairs"])
    return pairs


def synthetic_sources(model: Path, n: int, seed: int = 1234) -> list[str]:
    """n made-up sources of 3 to 10 words, each word a word-initial piece and perhaps one more."""
    sp = spm.SentencePieceProcessor()
    sp.Load(str(model))
    usable = [
        sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i))
    ]
    starts = [p for p in usable if p.startswith("\u2581") and len(p) > 1] or usable
    rest = [p for p in usable if not p.startswith("\u2581")] or usable
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(3, 10)):
            words.append(rng.choice(starts))
            if rng.random() < 0.3:
                words.append(rng.choice(rest))
        sentences.append(str(sp.decode_pieces(words)).strip() or "x")
    return sentences
