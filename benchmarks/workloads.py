"""What the engines are asked to do: the 8 cells, fixed-length inputs and real test sentences."""

from __future__ import annotations

import random
from dataclasses import dataclass

from service.engine.tokenizer import EOS_ID, TextTokenizer

FIRST_REAL_ID = 4  # after <pad> <unk> <s> </s>


@dataclass(frozen=True)
class Cell:
    beam: int
    batch: int
    precision: str  # fp32 | int8

    @property
    def key(self) -> str:
        search = "greedy" if self.beam == 1 else f"beam{self.beam}"
        return f"{search}/b{self.batch}/{self.precision}"


def all_cells(batches: tuple[int, ...] = (1, 32)) -> list[Cell]:
    return [Cell(beam, batch, p) for p in ("fp32", "int8") for beam in (1, 4) for batch in batches]


def fixed_sources(tokenizer: TextTokenizer, texts: list[str], n: int, length: int, seed: int = 0) -> list[list[int]]:
    """n sources of exactly `length` ids (EOS last): real token ids from `texts`, run together and cut."""
    stream = [i for ids in tokenizer.encode_ids(texts) for i in ids if i >= FIRST_REAL_ID]
    if not stream:
        stream = list(range(FIRST_REAL_ID, tokenizer.vocab_size))
    rng = random.Random(seed)
    sources = []
    for _ in range(n):
        start = rng.randrange(max(1, len(stream) - length))
        ids = (stream[start : start + length - 1] * length)[: length - 1]
        sources.append([*ids, EOS_ID])
    return sources


def real_sources(tokenizer: TextTokenizer, texts: list[str], limit: int) -> list[list[int]]:
    """Test sentences as source ids with EOS, cut to the model's limit as evaluation does."""
    return [[*ids[: limit - 1], EOS_ID] for ids in tokenizer.encode_ids(texts)]


def sentences_for(cell: Cell, batch1: int, batch32_calls: int) -> int:
    """How many sentences one timed round decodes in a cell: enough calls to smooth the timer."""
    return batch1 if cell.batch == 1 else cell.batch * batch32_calls
