"""How a search scores hypotheses, and the per-step rules it applies to log-probs (numpy only).

Legend: N rows fed to the model, V target vocabulary, T target length, S source length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]


@dataclass
class Hypothesis:
    """One decoded sequence. `tokens` ends with EOS when `finished`; one attention row per token."""

    tokens: list[int]
    token_log_probs: list[float]
    attention: FloatArray  # (T, ...) the step's attention for each token
    score: float  # sum of log-probs divided by the length penalty
    finished: bool

    @property
    def log_prob(self) -> float:
        return float(sum(self.token_log_probs))


def truncated_source_ids(tokenizer_ids: list[list[int]], limit: int, eos_id: int) -> list[list[int]]:
    """Source ids with EOS, cut to the model's limit: evaluation's rule (the API refuses instead)."""
    return [[*ids[: limit - 1], eos_id] for ids in tokenizer_ids]


FEW_COLUMNS = 8  # suppress writes up to this many forbidden columns one by one


def suppress(log_probs: FloatArray, token_ids: tuple[int, ...], renormalize: bool = False) -> FloatArray:
    """Forbid tokens a model must never generate (padding, BOS): their log-prob becomes -inf.

    `renormalize` takes the log-softmax again over the tokens left (transformers' renormalize_logits):
    log p - log(1 - p(forbidden)), which reads only the forbidden columns, not the whole vocabulary."""
    columns = list(token_ids)
    if renormalize and columns:
        forbidden = np.exp(log_probs[:, columns].astype(np.float64)).sum(axis=1, keepdims=True)  # (N, 1)
        log_probs -= np.log1p(-np.minimum(forbidden, 1.0 - 1e-12)).astype(log_probs.dtype)
    if len(columns) <= FEW_COLUMNS:
        # a column at a time. Right after onnxruntime's run numpy's first call meets cold caches: there
        # a fancy-indexed write of two columns took 14-20 us, two plain writes 5. Most of that moves to
        # the next call: whole greedy x 1 int8 decoding gained 1.02x (0.97-1.06), beam 4 1.00x
        for column in columns:
            log_probs[:, column] = -np.inf
    else:
        log_probs[:, columns] = -np.inf
    return log_probs


def max_output_length(src_len: int, limit: int, ratio: float = 2.0, slack: int = 10) -> int:
    """A cap for a target relative to its source (twice it plus slack, unless a bundle says
    otherwise), never past the model's limit."""
    return min(limit, math.ceil(ratio * src_len) + slack)


def length_penalty(length: int, alpha: float, form: str = "gnmt") -> float:
    """GNMT's ((5 + |Y|) / 6) ** alpha, or transformers' |Y| ** alpha ("power"); alpha = 0: no penalty."""
    if not alpha:
        return 1.0
    base = length if form == "power" else (5.0 + length) / 6.0
    return float(base**alpha)


Coverage = Callable[[FloatArray], float]  # a hypothesis's attention (T, ...) -> score bonus (<= 0)


@dataclass(frozen=True)
class Scoring:
    """How hypotheses are scored and when a sentence stops: the bundle's conventions.

    - `length_penalty`: "gnmt" or "power" (transformers), with exponent `alpha`;
    - `coverage`: GNMT's coverage penalty on a finished hypothesis (None: off);
    - `stopping`: "best_finished" (a sentence stops when its best candidate ends; with coverage,
      once beam-size hypotheses have ended, as fairseq does) or "transformers" (its heuristic with
      early_stopping=False: once beam-size hypotheses have ended and the best live beam, scored at
      its current length, cannot beat the worst of them; only the top beam-size candidates of a
      step may end);
    - `forced_eos`: the last token a sentence may write is EOS, at log-prob 0 (transformers'
      forced_eos_token_id);
    - `no_repeat_ngram`: no n-gram of this size may occur twice in an output (0: off), as
      transformers' and CTranslate2's `no_repeat_ngram_size`; the start token counts;
    - `repetition_penalty`: CTRL's penalty on tokens already written (1.0: off): a log-prob is
      multiplied by it, so the token becomes less likely;
    - `renormalize`: log-softmax again after tokens are banned (transformers' renormalize_logits).
    """

    alpha: float = 0.0
    length_penalty: str = "gnmt"
    coverage: Coverage | None = None
    stopping: str = "best_finished"
    forced_eos: bool = False
    no_repeat_ngram: int = 0
    repetition_penalty: float = 1.0
    renormalize: bool = False

    def normalised(self, log_prob: float, length: int) -> float:
        return log_prob / length_penalty(length, self.alpha, self.length_penalty)


def against_repeats(log_probs: FloatArray, histories: list[list[int]], scoring: Scoring) -> FloatArray:
    """Apply the repetition penalty and ban n-gram repeats, given each row's tokens so far (N, T_i)."""
    if scoring.repetition_penalty != 1.0:
        for row, history in enumerate(histories):
            seen = np.unique(history)
            log_probs[row, seen] *= scoring.repetition_penalty  # log-probs are <= 0: larger means less likely
    n = scoring.no_repeat_ngram
    if n > 0:
        banned = [_repeating(history, n) for history in histories]
        if any(banned):
            log_probs = _ban(log_probs, banned, scoring.renormalize)
    return log_probs


def _repeating(history: list[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already in `history`."""
    if len(history) < n:
        return []
    prefix = history[len(history) - n + 1 :]
    return [history[j + n - 1] for j in range(len(history) - n + 1) if history[j : j + n - 1] == prefix]


def _ban(log_probs: FloatArray, banned: list[list[int]], renormalize: bool) -> FloatArray:
    for row, tokens in enumerate(banned):
        if not tokens:
            continue
        if renormalize:  # log p - log(1 - p(banned)): the log-softmax over what is left
            mass = float(np.exp(log_probs[row, tokens].astype(np.float64)).sum())
            log_probs[row] -= np.float32(np.log1p(-min(mass, 1.0 - 1e-12)))
        log_probs[row, tokens] = -np.inf
    return log_probs


def force_eos(log_probs: FloatArray, rows: npt.NDArray[np.bool_], eos_id: int) -> FloatArray:
    """Rows at their last allowed step may only write EOS: -inf everywhere else, EOS at 0."""
    if rows.any():
        log_probs[rows] = -np.inf
        log_probs[rows, eos_id] = 0.0
    return log_probs


def coverage_penalty(coverage: npt.NDArray[np.floating[Any]], beta: float) -> float:
    """GNMT's beta * sum_j log(min(sum_i a_ij, 1)) from the (T, S) attention a hypothesis paid.

    It lowers the score of a hypothesis that left source tokens unattended, i.e. dropped them.
    Padding has exactly zero weight in every row (masked before the softmax) and is skipped, so
    the penalty counts real source tokens only.
    """
    total = coverage.sum(axis=0)  # (S,)
    real = total[total > 0]
    return beta * float(np.log(np.minimum(real, 1.0)).sum()) if beta else 0.0
