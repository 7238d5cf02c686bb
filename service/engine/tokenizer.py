"""SentencePiece wrapper with character offsets: the one tokenizer of training and serving.

Offsets are character (not byte) positions into the NFC-normalised text, with the leading
whitespace of a word piece left out, so `text[start:end]` is exactly what the piece covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import sentencepiece as spm

from service.engine.errors import TokenizerError
from service.engine.text import normalize

# The special ids every tokenizer of this project is trained with (models/vocab.py).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
WORD_BOUNDARY = "\u2581"  # SentencePiece's "▁"


@dataclass(frozen=True)
class Encoding:
    """A tokenized text: the ids, their pieces and character spans in `text`.

    `special` marks tokens that are not text (a target-language token, an end token): their span
    is empty. Empty `special` means none is."""

    text: str
    ids: list[int]
    pieces: list[str]
    offsets: list[tuple[int, int]]
    special: list[bool] = field(default_factory=list)

    def is_special(self, i: int) -> bool:
        return bool(self.special) and self.special[i]


class TextTokenizer(Protocol):
    """What the engine needs of a tokenizer: text to ids with offsets, and ids back to text."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> Encoding: ...

    def encode_ids(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, ids: list[int]) -> Encoding: ...

    def decode_text(self, ids: list[int]) -> str: ...


class Tokenizer:
    """Encodes text to ids with offsets and decodes ids back to text with offsets."""

    def __init__(self, model_proto: bytes) -> None:
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as exc:
            raise TokenizerError(f"not a SentencePiece model: {exc}") from exc
        self._proto = model_proto
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
        actual = {
            "pad": self._sp.pad_id(),
            "unk": self._sp.unk_id(),
            "bos": self._sp.bos_id(),
            "eos": self._sp.eos_id(),
        }
        if actual != expected:
            raise TokenizerError(f"special ids are {actual}; this project needs {expected}")

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        return cls(Path(path).read_bytes())

    @property
    def model_proto(self) -> bytes:
        return self._proto

    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    def piece(self, token_id: int) -> str:
        return str(self._sp.id_to_piece(token_id))

    def encode(self, text: str) -> Encoding:
        """Normalise `text` and tokenize it, keeping each piece's character span."""
        text = normalize(text)
        proto = self._sp.encode(text, return_type="proto")
        char_of_byte = char_index_of_bytes(text)
        ids, pieces, offsets = [], [], []
        for p in proto.pieces:
            start, end = char_of_byte[p.begin], char_of_byte[p.end]
            ids.append(int(p.id))
            pieces.append(str(p.piece))
            offsets.append(trim_leading_space(text, start, end))
        return Encoding(text=text, ids=ids, pieces=pieces, offsets=offsets)

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        """Ids only, for many texts at once (training's fast path; same normalisation)."""
        # one call per text: SentencePiece's list form starts a thread pool per call (250 us against
        # 8 us for one short sentence), which on the request path cost a third of the event loop
        out: list[list[int]] = [self._sp.encode(normalize(t), out_type=int) for t in texts]
        return out

    def decode(self, ids: list[int]) -> Encoding:
        """Decode ids (specials dropped) to text, with each piece's span in that text."""
        ids = [i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)]
        proto = self._sp.decode(ids, return_type="proto")
        text = str(proto.text)
        char_of_byte = char_index_of_bytes(text)
        offsets = [trim_leading_space(text, char_of_byte[p.begin], char_of_byte[p.end]) for p in proto.pieces]
        pieces = [str(p.piece) for p in proto.pieces]
        return Encoding(text=text, ids=ids, pieces=pieces, offsets=offsets)

    def decode_text(self, ids: list[int]) -> str:
        return self.decode(ids).text


def char_index_of_bytes(text: str) -> list[int]:
    """Map every UTF-8 byte offset of `text` (and its end) to a character offset."""
    index: list[int] = []
    for i, ch in enumerate(text):
        index.extend([i] * len(ch.encode("utf-8")))
    index.append(len(text))
    return index


def trim_leading_space(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    return start, end
