"""Greedy search as a step machine: the most likely token at every step, rows leave as they finish.

The driver (search.Cohort) feeds `tokens` to the model, hands the step's log-probs to
`advance`, and reorders the model state by the rows it returns. Finished sentences are taken
with `take_finished` after every step, so a caller can answer them before the rest are done.

Legend: B sentences, N rows still decoding (one per sentence), V target vocabulary.
"""

from __future__ import annotations

import numpy as np

from service.engine.row_order import gap_filling
from service.engine.scoring import FloatArray, Hypothesis, IntArray, Scoring, against_repeats, force_eos


class GreedyDecode:
    """Coverage does not change greedy's choice, only the score, so scores compare with beam's."""

    def __init__(self, max_lengths: IntArray, bos_id: int, eos_id: int, scoring: Scoring) -> None:
        B = len(max_lengths)
        self.max_lengths, self.bos_id, self.eos_id, self.scoring = max_lengths, bos_id, eos_id, scoring
        self.rows = np.arange(B)  # (N,) sentence of each row still decoding
        self.tokens: IntArray = np.full(B, bos_id, dtype=np.int64)  # (N,) token each row feeds next
        self._tokens: list[list[int]] = [[] for _ in range(B)]
        self._log_probs: list[list[float]] = [[] for _ in range(B)]
        self._attention: list[list[FloatArray]] = [[] for _ in range(B)]
        self._finished: list[tuple[int, list[Hypothesis]]] = []

    def start(self) -> IntArray | None:
        return None  # one row per sentence: the encoder's rows as they are

    @property
    def done(self) -> bool:
        return len(self.rows) == 0

    def advance(self, log_probs: FloatArray, attention: FloatArray) -> IntArray | None:
        """Take the step's (N, V) log-probs and (N, ...) attention; the rows that go on (None: all)."""
        scoring = self.scoring
        if scoring.no_repeat_ngram or scoring.repetition_penalty != 1.0:
            log_probs = against_repeats(log_probs, [[self.bos_id, *self._tokens[b]] for b in self.rows], scoring)
        if scoring.forced_eos:
            lengths = np.array([len(self._tokens[b]) for b in self.rows])
            log_probs = force_eos(log_probs, lengths + 1 >= self.max_lengths[self.rows], self.eos_id)
        tokens = log_probs.argmax(axis=1)  # (N,)
        chosen = log_probs[np.arange(len(tokens)), tokens].tolist()  # (N,) read once, not row by row
        keep = []
        for i, (sentence, token, log_prob) in enumerate(zip(self.rows.tolist(), tokens.tolist(), chosen, strict=True)):
            self._tokens[sentence].append(token)
            self._log_probs[sentence].append(log_prob)
            self._attention[sentence].append(attention[i])
            if token != self.eos_id and len(self._tokens[sentence]) < self.max_lengths[sentence]:
                keep.append(i)
            else:
                self._finished.append((sentence, [self._hypothesis(sentence)]))
        self.tokens = tokens
        return self._keep(np.asarray(gap_filling(keep), dtype=np.int64))

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
        attention = np.stack(self._attention[b])
        score = self.scoring.normalised(sum(self._log_probs[b]), len(self._tokens[b]))
        bonus = self.scoring.coverage(attention) if self.scoring.coverage else 0.0
        done = self._tokens[b][-1] == self.eos_id
        return Hypothesis(self._tokens[b], self._log_probs[b], attention, score + bonus, done)
