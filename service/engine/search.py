"""Greedy and beam search over a step protocol (numpy only), one step at a time.

The search never looks inside the model's state: it asks the model to take a step and to
reorder its state rows. The same code decodes a PyTorch model during training, and the ONNX
sessions in the service, so what is evaluated is what is served. A `Cohort` is one batch being
decoded: the service's scheduler steps many of them in turn, and takes each finished sentence
out as soon as it ends; `greedy_search` and `beam_search` run one cohort to its end.

Legend: B sentences, K beam, N = rows fed to the model (B·K, shrinking as sentences finish),
V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

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
    "row_candidates",
    "suppress",
    "truncated_source_ids",
]

StateT = TypeVar("StateT")
PLAIN = Scoring()  # no length penalty, coverage or repeat controls


class StepModel(Protocol[StateT]):
    """What the search needs of a model: one decoding step, and row reordering of its state."""

    def step(self, tokens: IntArray, state: StateT) -> tuple[FloatArray, FloatArray, StateT]:
        """Feed the last token of each row (N,); get log-probs (N, V), attention (N, ...), new state."""
        ...

    def reorder(self, state: StateT, rows: IntArray) -> StateT:
        """Select (and repeat) state rows: new row i is old row rows[i]."""
        ...


class Decode(Protocol):
    """A search as a step machine (GreedyDecode, BeamDecode)."""

    tokens: IntArray  # (N,) the token each row feeds the next step

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


class Cohort(Generic[StateT]):
    """One batch of sentences decoded step by step: a model, its state, and a search."""

    def __init__(self, model: StepModel[StateT], state: StateT, decode: Decode) -> None:
        self.model, self.decode = model, decode
        rows = decode.start()
        self.state = state if rows is None else model.reorder(state, rows)

    @property
    def done(self) -> bool:
        return self.decode.done

    @property
    def rows(self) -> int:
        return len(self.decode.tokens)

    def step(self) -> list[tuple[int, list[Hypothesis]]]:
        """One decoder step for every row; the sentences that finished with it."""
        log_probs, attention, state = self.model.step(self.decode.tokens, self.state)  # (N, V), (N, ...)
        self._reorder(state, self.decode.advance(log_probs, attention))
        return self.decode.take_finished()

    def drop(self, sentences: set[int]) -> None:
        self._reorder(self.state, self.decode.drop(sentences))

    def _reorder(self, state: StateT, rows: IntArray | None) -> None:
        if rows is not None and not self.decode.done:
            state = self.model.reorder(state, rows)
        self.state = state

    def run(self, sentences: int) -> list[list[Hypothesis]]:
        """Step to the end; each sentence's n-best in input order."""
        results: list[list[Hypothesis]] = [[] for _ in range(sentences)]
        while not self.done:
            for sentence, nbest in self.step():
                results[sentence] = nbest
        return results


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


def best_in_length_order(
    search: Callable[[list[list[int]]], list[list[Hypothesis]]], src_ids: list[list[int]], batch_size: int
) -> list[Hypothesis]:
    """Decode in batches of similar length (less padding); the best hypothesis of each, in input order."""
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    best: list[Hypothesis | None] = [None] * len(src_ids)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        for i, nbest in zip(chunk, search([src_ids[i] for i in chunk]), strict=True):
            best[i] = nbest[0]
    return [h for h in best if h is not None]
