"""Cutting a text into pieces the model can translate: lines, sentences, then clauses.

A model translates one sentence of at most its token limit at a time. A text is cut at line
breaks, then into sentences by sentencex (Wikimedia's segmenter: rules for ~300 languages with
fallbacks, abbreviations like "Dr." and "U.S." kept, character offsets, and fast); a sentence
over the limit is cut at clause punctuation (`;:,` and `；：，、`), packing clauses back together
while they fit; a clause still over the limit is cut at the limit, between tokens. Every piece
keeps its character span, so translations join back with the text's own whitespace.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Literal

from sentencex import get_sentence_boundaries

from service.engine.tokenizer import Encoding, TextTokenizer

Join = Literal["start", "line", "sentence", "clause", "limit"]  # what separates a piece from the one before
CLAUSE_END = re.compile(r"[;:,](?=\s)|[；：，、]")
LINE = re.compile(r"[^\n]+")
SAFETY = 2  # tokens of margin when cutting at the limit: a part re-tokenized alone may take one more


@dataclass(frozen=True)
class Piece:
    start: int  # character span in the text, without surrounding whitespace
    end: int
    join: Join


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def sentences(text: str, lang: str) -> list[Piece]:
    """The sentences of `text` (split at line breaks first), with how each joins the previous."""
    base = re.split(r"[_-]", lang)[0]
    pieces: list[Piece] = []
    for line in LINE.finditer(text):
        for i, boundary in enumerate(get_sentence_boundaries(base, line.group())):
            span = _trim(text, line.start() + boundary["start_index"], line.start() + boundary["end_index"])
            if span is not None:
                join: Join = "start" if not pieces else ("sentence" if i else "line")
                pieces.append(Piece(*span, join))
    return pieces


class Segmenter:
    """Pieces of a text that each fit the model's source limit (its end token included)."""

    def __init__(self, tokenizer: TextTokenizer, lang: str, max_tokens: int) -> None:
        self.tokenizer, self.lang, self.max_tokens = tokenizer, lang, max_tokens

    def tokens(self, text: str) -> int:
        return len(self.tokenizer.encode_ids([text])[0]) + 1  # + the end token

    def __call__(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        for sentence in sentences(text, self.lang):
            out += self._fit(text, sentence)
        return out

    def encoded(self, text: str) -> list[tuple[Piece, Encoding]]:
        """The pieces with their encodings: a sentence within the limit is tokenized once, for both."""
        out: list[tuple[Piece, Encoding]] = []
        for sentence in sentences(text, self.lang):
            enc = self.tokenizer.encode(text[sentence.start : sentence.end])
            if len(enc.ids) + 1 <= self.max_tokens:  # + the end token, as `tokens` counts
                out.append((sentence, enc))
            else:
                out += [(p, self.tokenizer.encode(text[p.start : p.end])) for p in self._fit(text, sentence)]
        return out

    def _fit(self, text: str, piece: Piece) -> list[Piece]:
        if self.tokens(text[piece.start : piece.end]) <= self.max_tokens:
            return [piece]
        clauses = self._clauses(text, piece)
        packed: list[Piece] = []
        for clause in clauses:
            if packed and self.tokens(text[packed[-1].start : clause.end]) <= self.max_tokens:
                packed[-1] = Piece(packed[-1].start, clause.end, packed[-1].join)
            else:
                packed.append(clause)
        return [part for p in packed for part in self._at_limit(text, p)]

    def _clauses(self, text: str, piece: Piece) -> list[Piece]:
        cuts = [m.end() for m in CLAUSE_END.finditer(text, piece.start, piece.end)]
        bounds = [piece.start, *(c for c in cuts if c < piece.end), piece.end]
        out: list[Piece] = []
        for a, b in itertools.pairwise(bounds):
            span = _trim(text, a, b)
            if span is not None:
                out.append(Piece(*span, piece.join if not out else "clause"))
        return out

    def _at_limit(self, text: str, piece: Piece) -> list[Piece]:
        """The last resort: cut between tokens, each part within the limit."""
        parts: list[Piece] = []
        start, join = piece.start, piece.join
        while start < piece.end:
            span = _trim(text, start, piece.end)
            if span is None:
                break
            start = span[0]
            if self.tokens(text[start : piece.end]) <= self.max_tokens:
                parts.append(Piece(start, piece.end, join))
                break
            enc = self.tokenizer.encode(text[start : piece.end])
            ends = [e for i, (_, e) in enumerate(enc.offsets) if not enc.is_special(i)]
            room = max(self.max_tokens - 1 - (len(enc.ids) - len(ends)) - SAFETY, 1)  # - end and special tokens
            cut = start + ends[min(room, len(ends)) - 1]
            parts.append(Piece(start, cut, join))
            start, join = cut, "limit"
        return parts
