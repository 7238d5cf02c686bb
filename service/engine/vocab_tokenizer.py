"""Marian's two-stage tokenizer: SentencePiece pieces, then a vocabulary's ids (converted OPUS-MT bundles).

A Hugging Face Marian checkpoint numbers its tokens by `vocab.json`, not by the SentencePiece
model: SentencePiece only cuts the text into pieces, and a piece the vocabulary lacks becomes
`<unk>`. A multilingual-target model reads a target-language token such as `>>cmn_Hans<<` before
the source; it is put in front of every source here, as a special token with an empty span.

Decoding follows transformers' MarianTokenizer with `skip_special_tokens=True`: special ids (end,
padding, unknown) leave no text, SentencePiece joins the other pieces, "▁" becomes a space and the
ends are stripped. Every id still gets a piece and a span, so tokens and log-probs stay aligned.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from service.engine.errors import TokenizerError
from service.engine.text import normalize
from service.engine.tokenizer import WORD_BOUNDARY, Encoding, char_index_of_bytes, trim_leading_space

UNK_PIECE = "<unk>"


def read_vocab(path: Path) -> dict[str, int]:
    """A `vocab.json` (piece -> id); its ids must be 0..n-1, each once."""
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path.name}: not a readable JSON vocabulary ({exc})") from exc
    if not isinstance(vocab, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
        raise TokenizerError(f"{path.name}: a vocabulary must map each piece to an integer id")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise TokenizerError(f"{path.name}: ids must be 0..{len(vocab) - 1}, each used once")
    return vocab


class VocabTokenizer:
    """Encodes text to vocabulary ids with offsets, and decodes ids back to text with offsets."""

    def __init__(
        self, model_proto: bytes, vocab: dict[str, int], specials: Iterable[int], prefix: str | None = None
    ) -> None:
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as exc:
            raise TokenizerError(f"not a SentencePiece model: {exc}") from exc
        if UNK_PIECE not in vocab:
            raise TokenizerError(f"the vocabulary has no {UNK_PIECE} token")
        if prefix is not None and prefix not in vocab:
            raise TokenizerError(f"the target-language token {prefix!r} is not in the vocabulary")
        self._vocab = vocab
        self._piece_of = {i: piece for piece, i in vocab.items()}
        self._unk = vocab[UNK_PIECE]
        self._special = frozenset(specials) | {self._unk}
        self._prefix = prefix

    @classmethod
    def from_files(cls, model: Path, vocab: Path, specials: Iterable[int], prefix: str | None = None) -> VocabTokenizer:
        return cls(model.read_bytes(), read_vocab(vocab), specials, prefix)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def id_of(self, piece: str) -> int | None:
        return self._vocab.get(piece)

    def encode(self, text: str) -> Encoding:
        """Normalise `text` and tokenize it: the target-language token first, then each piece's span."""
        text = normalize(text)
        proto = self._sp.encode(text, return_type="proto")
        char_of_byte = char_index_of_bytes(text)
        encoding = self._prefixed(text)
        for p in proto.pieces:
            encoding.ids.append(self._vocab.get(str(p.piece), self._unk))
            encoding.pieces.append(str(p.piece))
            encoding.offsets.append(trim_leading_space(text, char_of_byte[p.begin], char_of_byte[p.end]))
            encoding.special.append(False)
        return encoding

    def _prefixed(self, text: str) -> Encoding:
        if self._prefix is None:
            return Encoding(text=text, ids=[], pieces=[], offsets=[], special=[])
        return Encoding(
            text=text, ids=[self._vocab[self._prefix]], pieces=[self._prefix], offsets=[(0, 0)], special=[True]
        )

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        """Ids only, for many texts at once (same normalisation and target-language token)."""
        start = [] if self._prefix is None else [self._vocab[self._prefix]]
        # one call per text: SentencePiece's list form starts a thread pool per call (tokenizer.py)
        batch: list[list[str]] = [self._sp.encode(normalize(t), out_type=str) for t in texts]
        return [start + [self._vocab.get(p, self._unk) for p in pieces] for pieces in batch]

    def decode(self, ids: list[int]) -> Encoding:
        """Decode ids to text; every id keeps a piece and a span (special ids: empty, no text)."""
        pieces = [self._piece_of.get(i, UNK_PIECE) for i in ids]
        special = [i in self._special for i in ids]
        proto = self._sp.decode([p for p, s in zip(pieces, special, strict=True) if not s], return_type="proto")
        raw = str(proto.text)
        char_of_byte = char_index_of_bytes(raw)
        text = raw.replace(WORD_BOUNDARY, " ")  # transformers' Marian: a piece SentencePiece lacks keeps its "▁"
        lead = len(text) - len(text.lstrip())
        text = text.strip()
        spans = iter(proto.pieces)
        offsets, position = [], 0
        for is_special in special:
            if is_special:
                offsets.append((position, position))
                continue
            p = next(spans)
            start = min(max(char_of_byte[p.begin] - lead, 0), len(text))
            end = min(max(char_of_byte[p.end] - lead, start), len(text))
            offsets.append(trim_leading_space(text, start, end))
            position = end
        return Encoding(text=text, ids=list(ids), pieces=pieces, offsets=offsets, special=special)

    def decode_text(self, ids: list[int]) -> str:
        return self.decode(ids).text
