"""Greedy search as a step machine: the most likely token at every step, rows leave as they finish.

The driver (search.Cohort) feeds `tokens` to the model, hands the step's log-probs to
`advance`, and reorders the model state by the rows it returns. Finished sentences are taken
with `take_finished` after every step, so a caller can answer them before the rest are done.

Every row of one search is at the same step (rows leave, none join: a joining search is a part of
its own), so a step's choices go into (B, T) tables at [rows, step], by one call of the C kernel
(numpy where it is not built), and a sentence's lists are built once, when it ends.

Legend: B sentences, N rows still decoding (one per sentence), V target vocabulary, T steps.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from service.engine import native
from service.engine.row_order import gap_filling
from service.engine.scoring import FloatArray, Hypothesis, IntArray, Scoring, against_repeats, force_eos


class GreedyDecode:
    """Coverage does not change greedy's choice, only the score, so scores compare with beam's."""

    def __init__(self, max_lengths: IntArray, bos_id: int, eos_id: int, scoring: Scoring) -> None:
        self.max_lengths = np.ascontiguousarray(max_lengths, dtype=np.int64)
        B, T = len(max_lengths), max(int(self.max_lengths.max(initial=0)), 1)  # a sentence takes one step at least
        self.bos_id, self.eos_id, self.scoring = bos_id, eos_id, scoring
        self.rows = np.arange(B)  # (N,) sentence of each row still decoding
        self.tokens: IntArray = np.full(B, bos_id, dtype=np.int64)  # (N,) token each row feeds next
        self.t = 0  # steps taken: every row's length
        self._tables = native.GreedyTables(
            np.zeros((B, T), dtype=np.int64), np.zeros((B, T), dtype=np.float32), np.zeros((B, T), dtype=np.int64)
        )
        self._attention: list[FloatArray] = []  # (N_t, ...) each step's, for the rows then decoding
        self._finished: list[tuple[int, list[Hypothesis]]] = []

    def start(self) -> IntArray | None:
        return None  # one row per sentence: the encoder's rows as they are

    @property
    def done(self) -> bool:
        return len(self.rows) == 0

    def advance(self, log_probs: FloatArray, attention: FloatArray) -> IntArray | None:
        """Take the step's (N, V) log-probs and (N, ...) attention; the rows that go on (None: all)."""
        scoring, rows, t = self.scoring, self.rows, self.t
        if scoring.no_repeat_ngram or scoring.repetition_penalty != 1.0:
            histories = [[self.bos_id, *h] for h in self._tables.tokens[rows, :t].tolist()]
            log_probs = against_repeats(log_probs, histories, scoring)
        if scoring.forced_eos:
            log_probs = force_eos(log_probs, t + 1 >= self.max_lengths[rows], self.eos_id)
        chosen = native.greedy_choose(log_probs, rows, t, self.max_lengths, self.eos_id, self._tables)
        tokens, ending = chosen if chosen is not None else self._choose(log_probs)
        self._attention.append(attention)
        self.tokens, self.t = tokens, t + 1
        if not ending:  # most steps
            return None
        ends = self._ends(tokens, t)  # (N,)
        for sentence in rows[ends].tolist():
            self._finished.append((sentence, [self._hypothesis(sentence)]))
        return self._keep(np.asarray(gap_filling(np.flatnonzero(~ends).tolist()), dtype=np.int64))

    def _choose(self, log_probs: FloatArray) -> tuple[IntArray, int]:
        """native.greedy_choose in numpy: the tokens, and how many rows end."""
        rows, t, (N, V) = self.rows, self.t, log_probs.shape
        tokens = log_probs.argmax(axis=1)  # (N,)
        tables = self._tables
        tables.tokens[rows, t], tables.places[rows, t] = tokens, np.arange(N)
        tables.scores[rows, t] = log_probs.reshape(-1)[tokens + np.arange(0, N * V, V)]
        return tokens, int(np.count_nonzero(self._ends(tokens, t)))

    def _ends(self, tokens: IntArray, t: int) -> npt.NDArray[np.bool_]:
        """(N,) the rows whose token of step t ends them: EOS, or their sentence's length reached."""
        ends: npt.NDArray[np.bool_] = (tokens == self.eos_id) | (self.max_lengths[self.rows] <= t + 1)
        return ends

    def drop(self, sentences: set[int]) -> IntArray | None:
        """Stop decoding these sentences (their caller left); the rows that go on (None: all)."""
        keep = gap_filling([i for i, s in enumerate(self.rows) if int(s) not in sentences])
        return self._keep(np.asarray(keep, dtype=np.int64))

    def take_finished(self) -> list[tuple[int, list[Hypothesis]]]:
        """Sentences finished since the last call, each with its one hypothesis."""
        finished, self._finished = self._finished, []
        return finished

    def _keep(self, keep: IntArray) -> IntArray | None:
        if len(keep) == len(self.rows):
            return None
        self.rows, self.tokens = self.rows[keep], self.tokens[keep]
        return keep

    def _hypothesis(self, b: int) -> Hypothesis:
        t, tables = self.t, self._tables
        tokens, log_probs = tables.tokens[b, :t].tolist(), tables.scores[b, :t].tolist()
        places = tables.places[b, :t].tolist()
        attention = np.stack([step[i] for step, i in zip(self._attention, places, strict=True)])  # (T, ...)
        score = self.scoring.normalised(sum(log_probs), t)
        bonus = self.scoring.coverage(attention) if self.scoring.coverage else 0.0
        return Hypothesis(tokens, log_probs, attention, score + bonus, tokens[-1] == self.eos_id)
