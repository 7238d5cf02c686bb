"""Greedy and beam search over a step protocol (numpy only), one step at a time.

The search never looks inside the model's state: it asks the model to take a step and to
reorder its state rows. The same code decodes a PyTorch model during training, and the ONNX
sessions in the service, so what is evaluated is what is served. A `Cohort` is one batch being
decoded: the service's scheduler steps many of them in turn, and takes each finished sentence
out as soon as it ends; `greedy_search` and `beam_search` run one cohort to its end.

Legend: B sentences, K beam, N = rows fed to the model (B, then B·K, shrinking as sentences finish),
V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

from service.engine.beam import BeamDecode, row_candidates
from service.engine.greedy import GreedyDecode
from service.engine.scoring import (
    Coverage,
    FloatArray,
    Hypothesis,
    IntArray,
    Scoring,
    against_repeats,
    coverage_penalty,
    force_eos,
    length_penalty,
    max_output_length,
    suppress,
    truncated_source_ids,
)

__all__ = [
    "BeamDecode",
    "Cohort",
    "Coverage",
    "Decode",
    "FloatArray",
    "GreedyDecode",
    "Hypothesis",
    "IntArray",
    "Scoring",
    "StepModel",
    "against_repeats",
    "beam_search",
    "best_in_length_order",
    "coverage_penalty",
    "force_eos",
    "greedy_search",
    "length_penalty",
    "max_output_length",
    "nbest_in_length_order",
    "row_candidates",
    "suppress",
    "truncated_source_ids",
]

StateT = TypeVar("StateT")
PLAIN = Scoring()  # no length penalty, coverage or repeat controls


class StepModel(Protocol[StateT]):
    """What the search needs of a model: one decoding step, and row reordering of its state."""

    def step(self, tokens: IntArray, state: StateT) -> tuple[FloatArray, FloatArray, StateT]:
        """Feed the last token of each row (N,); get log-probs (N, V), attention (N, ..., S), new state."""
        ...

    def reorder(self, state: StateT, rows: IntArray) -> StateT:
        """Select (and repeat) state rows: new row i is old row rows[i]."""
        ...


class Decode(Protocol):
    """A search as a step machine (GreedyDecode, BeamDecode)."""

    tokens: IntArray  # (N,) the token each row feeds the next step
    max_lengths: IntArray  # (B,) one per sentence

    @property
    def done(self) -> bool: ...

    def start(self) -> IntArray | None:
        """State rows before the first step (None: the encoder's rows as they are)."""
        ...

    def advance(self, log_probs: FloatArray, attention: FloatArray) -> IntArray | None:
        """Take one step's (N, V) log-probs and (N, ...) attention; state rows for the next (None: same)."""
        ...

    def drop(self, sentences: set[int]) -> IntArray | None:
        """Stop decoding these sentences; state rows that go on (None: same)."""
        ...

    def take_finished(self) -> list[tuple[int, list[Hypothesis]]]:
        """(sentence, n-best) of every sentence finished since the last call."""
        ...


@dataclass
class _Part:
    """The sentences one search decodes inside a cohort: a run of consecutive rows."""

    decode: Decode
    first: int  # the cohort's number for the part's sentence 0
    sentences: int
    width: int | None  # the source width it was encoded with (its attention's last axis); None: its first step's


class Cohort(Generic[StateT]):
    """One batch decoded step by step: a model, its state, and one or more searches (parts).

    Each part owns a run of consecutive rows and may have its own options (greedy next to beam 4).
    `join` adds another cohort's sentences between two steps, mid-decode: the model state is
    merged and every part goes on as if alone (TGI's Seq2SeqLMBatch.concatenate; rows leave
    through the reorder, as its `filter`)."""

    def __init__(self, model: StepModel[StateT], state: StateT, decode: Decode, width: int | None = None) -> None:
        self.model = model
        self.parts = [_Part(decode, 0, len(decode.max_lengths), width)]
        self._sentences = len(decode.max_lengths)
        rows = decode.start()
        self.state = state if rows is None else model.reorder(state, rows)

    @property
    def done(self) -> bool:
        return all(part.decode.done for part in self.parts)

    @property
    def rows(self) -> int:
        return sum(len(part.decode.tokens) for part in self.parts)

    @property
    def sentences(self) -> int:
        """Sentences taken in so far, finished ones included: a joining part's numbers follow them."""
        return self._sentences

    def step(self) -> list[tuple[int, list[Hypothesis]]]:
        """One decoder step for every row; the sentences that finished with it."""
        if self.done:
            return []
        parts = self.parts
        tokens = parts[0].decode.tokens if len(parts) == 1 else np.concatenate([p.decode.tokens for p in parts])
        log_probs, attention, state = self.model.step(tokens, self.state)  # (N, V), (N, ..., S)

        def advance(part: _Part, rows: slice) -> IntArray | None:
            if part.width is None:  # the source width it is encoded with: its first step's
                part.width = attention.shape[-1]
            return part.decode.advance(log_probs[rows], _fit(attention[rows], part.width))

        self._reorder(state, self._each_part(advance))
        return self._finished()

    def drop(self, sentences: set[int]) -> None:
        def drop(part: _Part, rows: slice) -> IntArray | None:
            mine = {s - part.first for s in sentences if part.first <= s < part.first + part.sentences}
            return part.decode.drop(mine) if mine else None

        self._reorder(self.state, self._each_part(drop))
        self._prune()

    def _each_part(self, act: Callable[[_Part, slice], IntArray | None]) -> IntArray | None:
        """`act` on every part with its rows; the state rows that go on, over all parts (None: all)."""
        if len(self.parts) == 1:  # most cohorts: the part's own rows are the cohort's
            part = self.parts[0]
            return act(part, slice(0, len(part.decode.tokens)))
        kept_rows, start, changed = [], 0, False
        for part in self.parts:
            n = len(part.decode.tokens)
            kept = act(part, slice(start, start + n))
            changed |= kept is not None
            kept_rows.append(np.arange(n) + start if kept is None else kept + start)
            start += n
        return np.concatenate(kept_rows) if changed else None

    def join(self, other: Cohort[StateT]) -> int | None:
        """Take `other`'s sentences into this batch; the number of its first sentence here, or None
        when the model cannot mix rows at different steps (then `other` decodes on its own)."""
        model = self.model  # a model with `joinable` and `merge(a, b)` (OnnxSeq2Seq) can mix them
        if other.model is not model or not getattr(model, "joinable", False) or self.done:
            return None
        if any(part.width is None for part in [*self.parts, *other.parts]):
            return None
        offset = self._sentences
        self.state = model.merge(self.state, other.state)  # type: ignore[attr-defined]
        self.parts += [_Part(p.decode, p.first + offset, p.sentences, p.width) for p in other.parts]
        self._sentences += other.sentences
        return offset

    def _finished(self) -> list[tuple[int, list[Hypothesis]]]:
        finished = [(part.first + s, nbest) for part in self.parts for s, nbest in part.decode.take_finished()]
        self._prune()
        return finished

    def _prune(self) -> None:
        """Parts with no rows left go (one stays, done, when all are)."""
        self.parts = [part for part in self.parts if not part.decode.done] or self.parts[:1]

    def _reorder(self, state: StateT, rows: IntArray | None) -> None:
        if rows is not None and not self.done:
            state = self.model.reorder(state, rows)
        self.state = state

    def run(self, sentences: int) -> list[list[Hypothesis]]:
        """Step to the end; each sentence's n-best in input order."""
        results: list[list[Hypothesis]] = [[] for _ in range(sentences)]
        while not self.done:
            for sentence, nbest in self.step():
                results[sentence] = nbest
        return results


def _fit(attention: FloatArray, width: int | None) -> FloatArray:
    """A part's attention (n, ..., S) at the width it was encoded with: the batch may pad the source
    further (a longer sentence joined) or cut padding (the longest left); either way only columns
    of padding, which are exactly 0, are added or removed."""
    if width is None or attention.shape[-1] == width:
        return attention
    if attention.shape[-1] > width:
        return attention[..., :width]
    widths = [(0, 0)] * (attention.ndim - 1) + [(0, width - attention.shape[-1])]
    return np.pad(attention, widths)


def greedy_search(
    model: StepModel[StateT],
    state: StateT,
    max_lengths: IntArray,
    bos_id: int,
    eos_id: int,
    scoring: Scoring = PLAIN,
) -> list[Hypothesis]:
    """Pick the most likely token at every step; rows leave the batch as they finish."""
    decode = GreedyDecode(max_lengths, bos_id, eos_id, scoring)
    return [nbest[0] for nbest in Cohort(model, state, decode).run(len(max_lengths))]


def beam_search(
    model: StepModel[StateT],
    state: StateT,
    max_lengths: IntArray,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    n_best: int = 1,
    scoring: Scoring = PLAIN,
) -> list[list[Hypothesis]]:
    """Beam search over B sentences at once (service/engine/beam.py); the n_best of each, best first."""
    decode = BeamDecode(max_lengths, bos_id, eos_id, beam_size, n_best, scoring)
    return Cohort(model, state, decode).run(len(max_lengths))


def nbest_in_length_order(
    search: Callable[[list[list[int]]], list[list[Hypothesis]]], src_ids: list[list[int]], batch_size: int
) -> list[list[Hypothesis]]:
    """Decode in batches of similar length (less padding); every n-best, in input order."""
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    found: dict[int, list[Hypothesis]] = {}
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        found |= dict(zip(chunk, search([src_ids[i] for i in chunk]), strict=True))
    return [found[i] for i in range(len(src_ids))]


def best_in_length_order(
    search: Callable[[list[list[int]]], list[list[Hypothesis]]], src_ids: list[list[int]], batch_size: int
) -> list[Hypothesis]:
    """`nbest_in_length_order`'s best hypothesis of each."""
    return [nbest[0] for nbest in nbest_in_length_order(search, src_ids, batch_size)]
