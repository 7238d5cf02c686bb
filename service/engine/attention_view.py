"""Turning a hypothesis' raw attention (T, L, N, S) into what a client asked to see.

- layer and heads: one layer, and the mean of its heads or one head;
- granularity: subword pieces, or words (sum over the source pieces of a word, mean over the
  target pieces of a word, then each row renormalised to sum to 1);
- format: the dense matrix, or the top k source positions of each row.

Legend: T target tokens, S source tokens, L layers, N heads.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from service.engine.scripts import unspaced
from service.engine.tokenizer import WORD_BOUNDARY

Matrix = npt.NDArray[np.float64]
WORD_RULE = (
    "word = source/target pieces between whitespace (scripts written without spaces, e.g. Chinese: each piece; "
    "punctuation and special tokens: their own); "
    "columns summed over a source word's pieces, rows averaged over a target word's pieces, rows renormalised"
)


@dataclass(frozen=True)
class Token:
    text: str
    start: int
    end: int
    special: bool = False
    logprob: float | None = None


def select_heads(attention: npt.NDArray[Any], layer: int, heads: str | int) -> Matrix:
    """(T, L, N, S) -> (T, S): one layer, the mean of its heads or one head."""
    per_layer = attention[:, layer]  # (T, N, S)
    if heads == "mean":
        return np.asarray(per_layer.mean(axis=1), dtype=np.float64)
    return np.asarray(per_layer[:, int(heads)], dtype=np.float64)


def _is_punctuation(text: str) -> bool:
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def word_groups(tokens: list[Token], pieces: list[str]) -> list[list[int]]:
    """Indices of the tokens that form each word, in order. Language-neutral: words are told
    apart by SentencePiece's word boundary, punctuation, special tokens and the script."""
    groups: list[list[int]] = []
    for i, (token, piece) in enumerate(zip(tokens, pieces, strict=True)):
        surface = piece.lstrip(WORD_BOUNDARY)
        starts_word = (
            not groups
            or unspaced(surface)
            or unspaced(pieces[i - 1])
            or token.special
            or tokens[i - 1].special
            or piece.startswith(WORD_BOUNDARY)
            or _is_punctuation(surface)
            or _is_punctuation(tokens[i - 1].text)
        )
        if starts_word:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def merge_tokens(tokens: list[Token], groups: list[list[int]], text: str) -> list[Token]:
    merged = []
    for group in groups:
        first, last = tokens[group[0]], tokens[group[-1]]
        logprobs = [tokens[i].logprob for i in group]
        logprob = None if any(lp is None for lp in logprobs) else float(sum(lp for lp in logprobs if lp is not None))
        surface = first.text if first.special else text[first.start : last.end]
        merged.append(Token(surface, first.start, last.end, first.special, logprob))
    return merged


def merge_matrix(matrix: Matrix, src_groups: list[list[int]], tgt_groups: list[list[int]]) -> Matrix:
    """(T, S) subword attention -> (T_words, S_words) word attention, rows renormalised."""
    columns = np.stack([matrix[:, g].sum(axis=1) for g in src_groups], axis=1)  # (T, Sw)
    rows = np.stack([columns[g].mean(axis=0) for g in tgt_groups], axis=0)  # (Tw, Sw)
    return np.asarray(rows / np.clip(rows.sum(axis=1, keepdims=True), 1e-12, None), dtype=np.float64)


def top_k(matrix: Matrix, k: int) -> list[list[dict[str, float | int]]]:
    """Each row's k largest weights as {"index", "weight"}, largest first."""
    k = min(k, matrix.shape[1])
    order = np.argsort(-matrix, axis=1, kind="stable")[:, :k]
    return [[{"index": int(j), "weight": float(row[j])} for j in idx] for row, idx in zip(matrix, order, strict=True)]
