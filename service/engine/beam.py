"""Beam search as a step machine over B sentences at once.

A finished hypothesis scores its log-prob over the length penalty, plus the coverage penalty
of its attention (GNMT's rescoring), so a hypothesis that drops words ranks lower. With the
"best_finished" rule a sentence is done when its best candidate of a step ends in EOS and it
has n_best finished hypotheses (with coverage: beam_size of them); with "transformers" as
`Scoring` describes. A sentence that reaches its max length ends every beam there (those not
ending in EOS are marked unfinished). Beam size 1 gives exactly what greedy search gives.

Legend: B sentences, K beam, A sentences still searching, N = A·K rows fed to the model (A at the first step),
V target vocabulary, C candidates per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.engine.native import beam_candidates as beam_candidates_native
from service.engine.native import top_per_row as top_per_row_native
from service.engine.row_order import gap_filling
from service.engine.scoring import FloatArray, Hypothesis, IntArray, Scoring, against_repeats, force_eos


@dataclass
class _Trace:
    """Per-step records that let a hypothesis be rebuilt by following back-pointers."""

    last_token: list[IntArray]  # [t] (N_t,) token each row carries into step t
    last_log_prob: list[FloatArray]  # [t] (N_t,)
    parent: list[IntArray]  # [t] (N_t,) row at step t-1 it extends
    attention: list[FloatArray]  # [t] (N_t, ...) attention computed at step t

    def rebuild(self, t: int, row: int, token: int, log_prob: float) -> tuple[list[int], list[float], FloatArray]:
        tokens, log_probs, attention = [token], [log_prob], [self.attention[t][row]]
        while t > 0:
            tokens.append(int(self.last_token[t][row]))
            log_probs.append(float(self.last_log_prob[t][row]))
            row = int(self.parent[t][row])
            t -= 1
            attention.append(self.attention[t][row])
        return tokens[::-1], log_probs[::-1], np.stack(attention[::-1])


@dataclass(frozen=True)
class _Ended:
    """A hypothesis that ended at step t, scored by its length alone (no coverage penalty). It is
    rebuilt from the trace only if it is among its sentence's n best when the sentence is done: at a
    sentence's last step all 2K candidates end, and n_best of them are kept."""

    t: int
    row: int
    token: int
    log_prob: float  # the token's own
    score: float


_Candidate = tuple[int, int, float]  # (row, token, cumulative log-prob)
Ranked = tuple[IntArray, IntArray, npt.NDArray[np.float64]]  # rows, tokens, cumulative log-probs: (A, n) each


def row_candidates(
    log_probs: FloatArray, cum: npt.NDArray[np.float64], n: int, sentences: int
) -> tuple[IntArray, npt.NDArray[np.float64]]:
    """Each row's n best tokens (N, n) and their cumulative scores, grouped by sentence (A, K·n).

    A sentence's n best continuations over all K·V candidates are among its rows' own n best
    (a row adds one constant to all its tokens), so selecting per row first reads V values a row
    once, instead of partitioning K·V sums: 3x faster at 32 sentences × beam 4 × V 6000.
    """
    tokens = top_per_row(log_probs, min(n, log_probs.shape[1]))  # (N, n)
    totals = cum[:, None] + log_probs[np.arange(len(tokens))[:, None], tokens]  # (N, n)
    return tokens, totals.reshape(sentences, -1)  # rows are consecutive per sentence


GROUP = 64  # columns per group when looking for a row's best tokens


def top_per_row(values: FloatArray, n: int) -> IntArray:
    """The columns of each row's n largest values (N, n), ascending by column. Among equal values at
    the boundary the lower columns are chosen, whatever the other rows.

    The C kernel (service/engine/native.py) reads each row once against a heap of its n best: 2, 6, 46
    and 180 us at 1, 4, 32 and 128 rows x 8,000 (n = 8) where the numpy below took 20, 32, 167 and 614
    (AMD EPYC; docs/benchmarks.md), and over 1 MB of log-probs it lets go of the interpreter lock. Where it
    is not built, or does not apply, numpy: the columns are split into groups of GROUP (group g:
    columns g, g + G, g + 2G, ...). The n-th largest group maximum is a floor: n values reach it (the
    maxima of the n best groups), so a row's n largest all do, and few others (only values of those n
    groups can exceed it). The rows are read once for the group maxima and once against the floor,
    and only what reaches it is sorted. A vocabulary under 2n groups takes a stable sort. A row with
    a NaN takes argpartition, whose order for it is numpy's (NaN above everything)."""
    native = top_per_row_native(values, n)
    if native is not None:
        return native
    N, V = values.shape
    G = V // GROUP
    if N == 0:
        return np.zeros((0, n), dtype=np.int64)
    if 2 * n > G:
        return _stably_sorted_per_row(values, n)
    values = np.ascontiguousarray(values)
    grouped = values[:, : GROUP * G].reshape(N, GROUP, G)  # a view: each row's columns split, the tail left out
    floor = np.partition(grouped.max(axis=1), G - n, axis=1)[:, G - n : G - n + 1]  # (N, 1)
    reached = np.flatnonzero(values >= floor)  # by row, then column
    rows = reached // V
    starts = np.searchsorted(rows, np.arange(N + 1))  # (N + 1,) each row's run in `reached`
    if (starts[1:] - starts[:-1] < n).any():  # a NaN compares false with the floor
        return _argpartition_per_row(values, n)
    ranked = np.lexsort((-values.ravel()[reached], rows))  # by row, then value descending, then column
    picked = reached[ranked[(starts[:-1, None] + np.arange(n)).ravel()]]  # (N·n,)
    return np.sort((picked % V).reshape(N, n), axis=1)


def _stably_sorted_per_row(values: FloatArray, n: int) -> IntArray:
    """A small vocabulary's rows sorted whole, stably: equal values keep their column order."""
    return np.sort(np.argsort(-values, axis=1, kind="stable")[:, :n], axis=1)


def _argpartition_per_row(values: FloatArray, n: int) -> IntArray:
    V = values.shape[1]
    return np.sort(np.argpartition(values, V - n, axis=1)[:, V - n :], axis=1)


class BeamDecode:
    """The bookkeeping of one beam search: the trace, finished hypotheses, alive beams.

    The driver (search.Cohort) calls `start` once, then `advance` with every step's log-probs,
    reordering the model state by the rows it returns."""

    def __init__(
        self, max_lengths: IntArray, bos_id: int, eos_id: int, beam: int, n_best: int, scoring: Scoring
    ) -> None:
        if not 1 <= n_best <= beam:
            raise ValueError(f"n_best must be in 1..beam_size ({beam}), got {n_best}")
        B, K = len(max_lengths), beam
        self.K, self.n_best, self.eos_id, self.scoring, self.max_lengths = K, n_best, eos_id, scoring, max_lengths
        # one row a sentence until the first advance spreads each to K (`rows_per`)
        self.trace = _Trace([np.full(B, bos_id, dtype=np.int64)], [np.zeros(B, np.float32)], [np.arange(B)], [])
        self.finished: list[list[Hypothesis | _Ended]] = [[] for _ in range(B)]
        self.histories: list[list[int]] = [[bos_id] for _ in range(B)]  # each row's tokens, for repeat controls
        self.track = scoring.no_repeat_ngram > 0 or scoring.repetition_penalty != 1.0
        self.tokens: IntArray = self.trace.last_token[0]  # (N,) token each row feeds next
        self.cum = np.zeros(B)  # (N,) cumulative log-prob of each row
        self._keep_active(list(range(B)))
        self.t = 0
        self._done_now: list[int] = []

    def start(self) -> None:
        """The encoder's rows as they are: one a sentence for the first step."""
        return None

    @property
    def rows_per(self) -> int:
        """Rows a sentence has in the step about to be fed: one at the first, K after. All K beams would
        start from the same BOS, so K rows would compute one row's results K times (beam 4 x 16 real
        sentences: a first step of 64 rows took 6.5 ms, of 16 rows 2.2)."""
        return self.K if self.t else 1

    @property
    def done(self) -> bool:
        return not self.active

    def advance(self, log_probs: FloatArray, attention: FloatArray) -> IntArray | None:
        """Take the step's (N, V) log-probs and (N, ...) attention; the state rows of the next step."""
        t = self.t
        if self.track:
            log_probs = against_repeats(log_probs, self.histories, self.scoring)
        last = t + 1 >= self._active_lengths  # (A,) sentences at their max length
        if self.scoring.forced_eos:
            log_probs = force_eos(log_probs, np.repeat(last, self.rows_per), self.eos_id)
        self.trace.attention.append(attention)
        (alive_rows, alive_tokens, alive_scores), going = self._beams(self._candidates(log_probs), last, log_probs)
        if not going.all():  # sentences leave: the last ones' rows fill the gaps
            blocks = gap_filling(np.flatnonzero(going).tolist())
            self._keep_active([self.active[a] for a in blocks])
            if not self.active:  # no rows go on
                self.tokens = self.tokens[:0]
                return np.zeros(0, dtype=np.int64)
            alive_rows, alive_tokens, alive_scores = alive_rows[blocks], alive_tokens[blocks], alive_scores[blocks]
        rows = alive_rows.ravel()
        self.tokens = alive_tokens.ravel()
        self.cum = alive_scores.ravel()
        if self.track:
            self.histories = [[*self.histories[r], int(tok)] for r, tok in zip(rows, self.tokens, strict=True)]
        self.trace.last_token.append(self.tokens)
        self.trace.last_log_prob.append(log_probs[rows, self.tokens])
        self.trace.parent.append(rows)
        self.t += 1
        return rows

    def _beams(
        self, ranked: Ranked, last: npt.NDArray[np.bool_], log_probs: FloatArray
    ) -> tuple[Ranked, npt.NDArray[np.bool_]]:
        """Each sentence's K beams (row, token, score: (A, K) each) from its ranked candidates ((A, 2K)
        each), and whether it goes on (A,); finished hypotheses are recorded, done sentences noted."""
        K, A = self.K, len(self.active)
        rows, tokens, scores = ranked
        # the common case, decided for all sentences at once: none of a sentence's K best ends or is
        # impossible, so they are its beams and nothing finishes (what _advance finds, one by one).
        # transformers' rule may also stop a sentence no beam of which ends: it always goes one by one
        plain = ~last & ((tokens[:, :K] != self.eos_id) & (scores[:, :K] > -np.inf)).all(axis=1)
        if self.scoring.stopping == "transformers" or tokens.shape[1] < K:  # or a first step with V < K
            plain[:] = False
        elif plain.all():  # most steps: the K best are the beams, as they are
            return (rows[:, :K], tokens[:, :K], scores[:, :K]), plain
        beams = (np.empty((A, K), np.int64), np.empty((A, K), np.int64), np.empty((A, K)))
        if plain.any():
            for beam, chosen in zip(beams, ranked, strict=True):
                beam[plain] = chosen[plain, :K]
        going = plain.copy()
        self._one_by_one(np.flatnonzero(~plain), ranked, last, log_probs, beams, going)
        return beams, going

    def _one_by_one(
        self,
        places: IntArray,
        ranked: Ranked,
        last: npt.NDArray[np.bool_],
        log_probs: FloatArray,
        beams: Ranked,
        going: npt.NDArray[np.bool_],
    ) -> None:
        """The step as it reads, for the sentences at `places`: each one's candidates through
        `_advance`, its beams written into `beams` and whether it goes on into `going`."""
        rows, tokens, scores = ranked
        for a in places:
            sentence = self.active[a]
            candidates = list(zip(rows[a].tolist(), tokens[a].tolist(), scores[a].tolist(), strict=True))
            if alive := self._advance(sentence, candidates, log_probs, self.t, bool(last[a])):
                for beam, values in zip(beams, zip(*alive, strict=True), strict=True):
                    beam[a] = values
                going[a] = True
            else:
                self._done_now.append(sentence)

    def _candidates(self, log_probs: FloatArray) -> Ranked:
        """Each sentence's 2K best continuations, best first (equal scores: the lower row, then the
        lower token, whatever the batch): the state row each extends, its token and its cumulative
        log-prob, (A, 2K) each."""
        K, A, R = self.K, len(self.active), self.rows_per
        n = min(2 * K, log_probs.shape[1])
        # the C kernel keeps 2R candidates of R rows a sentence: it ranks every step but the first (R = 1)
        ranked = beam_candidates_native(log_probs, self.cum, K, n) if R == K else None
        if ranked is not None:  # the C kernel: the same candidates in one call (service/engine/native.py)
            return ranked
        row_tokens, totals = row_candidates(log_probs, self.cum, n, A)  # (N, C), (A, R·C)
        C = row_tokens.shape[1]
        # a sentence has R·C <= 2K² candidates: one sort of them all, where selecting first took three calls
        order = np.argsort(-totals, axis=1, kind="stable")[:, : 2 * K]  # (A, min(2K, R·C))
        sentence = np.arange(A)[:, None]
        rows = sentence * R + order // C  # (A, min(2K, R·C))
        return rows, row_tokens[rows, order % C], totals[sentence, order]

    def drop(self, sentences: set[int]) -> IntArray | None:
        """Stop searching these sentences (their caller left); the state rows that go on (None: all).
        Between steps, so only the records of the rows about to be fed are cut."""
        blocks = gap_filling([a for a, s in enumerate(self.active) if s not in sentences])
        if len(blocks) == len(self.active):
            return None
        keep = np.array([a * self.rows_per + k for a in blocks for k in range(self.rows_per)], dtype=np.int64)
        self._keep_active([self.active[a] for a in blocks])
        self.tokens, self.cum = self.tokens[keep], self.cum[keep]
        if self.track:
            self.histories = [self.histories[r] for r in keep]
        tr = self.trace
        tr.last_token[-1], tr.last_log_prob[-1], tr.parent[-1] = (
            tr.last_token[-1][keep],
            tr.last_log_prob[-1][keep],
            tr.parent[-1][keep],
        )
        return keep

    def _keep_active(self, sentences: list[int]) -> None:
        """The sentences still searching, in row-block order, and their max lengths (A,), which every
        step compares with its position."""
        self.active = sentences
        self._active_lengths = self.max_lengths[sentences]

    def take_finished(self) -> list[tuple[int, list[Hypothesis]]]:
        """Sentences finished since the last call, each with its n_best hypotheses, best first."""
        done, self._done_now = self._done_now, []
        return [(b, [self._built(h) for h in sorted(self.finished[b], key=lambda h: -h.score)[: self.n_best]])
                for b in done]  # fmt: skip

    def _advance(
        self, sentence: int, candidates: list[_Candidate], log_probs: FloatArray, t: int, last_step: bool
    ) -> list[_Candidate]:
        """Move finished candidates to `finished`; return the K beams that go on (none when done)."""
        if self.scoring.stopping == "transformers":
            return self._advance_transformers(sentence, candidates, log_probs, t, last_step)
        alive: list[_Candidate] = []
        finished = self.finished[sentence]
        for row, token, score in candidates:
            if score == -np.inf or len(alive) == self.K:
                break
            if token == self.eos_id or last_step:
                finished.append(self._hypothesis(t, row, token, score, log_probs))
            else:
                alive.append((row, token, score))
        if self.scoring.coverage is None:
            done = candidates[0][1] == self.eos_id and len(finished) >= self.n_best
        else:  # rescoring can promote a longer hypothesis: wait for K finished ones, as fairseq does
            done = len(finished) >= self.K
        if last_step or done or not alive:
            return []
        return self._pad(alive)

    def _advance_transformers(
        self, sentence: int, candidates: list[_Candidate], log_probs: FloatArray, t: int, last_step: bool
    ) -> list[_Candidate]:
        """transformers' beam step: only the top K candidates may end; K best finished are kept; the
        sentence stops once K have ended and the best live beam at its length cannot beat the worst."""
        finished = self.finished[sentence]
        for row, token, score in candidates[: self.K]:
            if score > -np.inf and (token == self.eos_id or last_step):
                finished.append(self._hypothesis(t, row, token, score, log_probs))
        finished.sort(key=lambda h: -h.score)
        del finished[self.K :]
        alive = [c for c in candidates if c[1] != self.eos_id and c[2] > -np.inf][: self.K]
        if last_step or not alive:
            return []
        best_possible = self.scoring.normalised(alive[0][2], t + 1)
        if len(finished) == self.K and best_possible <= finished[-1].score:
            return []
        return self._pad(alive)

    def _hypothesis(self, t: int, row: int, token: int, score: float, log_probs: FloatArray) -> Hypothesis | _Ended:
        """The hypothesis ending in `token` at step t: its t + 1 tokens scored; rebuilt now only where the
        score needs its attention (the coverage penalty). The trace's steps up to t never change after it
        (`drop` cuts only the rows about to be fed), so a later rebuild reads what this one would."""
        if self.scoring.coverage is None:
            return _Ended(t, row, token, float(log_probs[row, token]), self.scoring.normalised(score, t + 1))
        tokens, token_log_probs, attention = self.trace.rebuild(t, row, token, float(log_probs[row, token]))
        normalised = self.scoring.normalised(score, len(tokens)) + self.scoring.coverage(attention)
        return Hypothesis(tokens, token_log_probs, attention, normalised, token == self.eos_id)

    def _built(self, h: Hypothesis | _Ended) -> Hypothesis:
        if isinstance(h, Hypothesis):
            return h
        tokens, token_log_probs, attention = self.trace.rebuild(h.t, h.row, h.token, h.log_prob)
        return Hypothesis(tokens, token_log_probs, attention, h.score, h.token == self.eos_id)

    def _pad(self, alive: list[_Candidate]) -> list[_Candidate]:
        dead = (alive[0][0], alive[0][1], -np.inf)  # pads the beam; never chosen again
        return alive + [dead] * (self.K - len(alive))
