"""Attention for the RNN family: c_i = sum_j a_ij h_j with a selectable score function.

Scores, for a query q (the decoder state) and encoder states h_j:
    dot         q . h_j
    scaled_dot  q . h_j / sqrt(d)
    cosine      s * cos(q, h_j), s = exp(log_scale) learned (the inverse temperature)
    general     q . (W h_j)                         (Luong's bilinear score)
    additive    v . tanh(W q + U h_j)               (Bahdanau)
What does not depend on the step (W h_j, U h_j) is computed once by `precompute_keys`.
Padding is masked before the softmax, so padded positions get exactly zero weight.

Legend: B batch, S source length, Q query size, M memory size, A key size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.config import SCORE_FUNCTIONS


def masked_softmax(scores: Tensor, pad_mask: Tensor) -> Tensor:
    """Softmax over the last axis where `pad_mask` (True = padding) positions get exactly 0."""
    return torch.softmax(scores.masked_fill(pad_mask, float("-inf")), dim=-1)


class Attention(nn.Module):
    """One attention head over encoder states, returning (context, weights); it stores nothing."""

    def __init__(self, score: str, query_dim: int, memory_dim: int, attn_dim: int = 256) -> None:
        super().__init__()
        if score not in SCORE_FUNCTIONS:
            raise ValueError(f"unknown score function {score!r}; choose one of {SCORE_FUNCTIONS}")
        if score in ("dot", "scaled_dot", "cosine") and query_dim != memory_dim:
            raise ValueError(f"{score} attention needs query_dim == memory_dim, got {query_dim} != {memory_dim}")
        self.score_name = score
        self.key_proj: nn.Linear | None = None
        self.query_proj: nn.Linear | None = None
        self.energy: nn.Linear | None = None
        if score == "general":
            self.key_proj = nn.Linear(memory_dim, query_dim, bias=False)  # W
        elif score == "additive":
            self.key_proj = nn.Linear(memory_dim, attn_dim, bias=False)  # U
            self.query_proj = nn.Linear(query_dim, attn_dim)  # W (with the bias)
            self.energy = nn.Linear(attn_dim, 1, bias=False)  # v
        # Cosine scores lie in [-1, 1]; a learned inverse temperature lets the softmax sharpen.
        self.log_scale = nn.Parameter(torch.tensor(math.log(10.0))) if score == "cosine" else None

    def precompute_keys(self, memory: Tensor) -> Tensor:
        """Keys from encoder states (B, S, M) -> (B, S, A); computed once per source."""
        return memory if self.key_proj is None else self.key_proj(memory)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """Unnormalised scores of query (B, Q) against keys (B, S, A) -> (B, S)."""
        if self.score_name == "additive":
            assert self.query_proj is not None and self.energy is not None
            hidden = torch.tanh(self.query_proj(query).unsqueeze(1) + keys)  # (B, S, A)
            return self.energy(hidden).squeeze(-1)  # (B, S)
        if self.score_name == "cosine":
            assert self.log_scale is not None
            cos = F.cosine_similarity(query.unsqueeze(1), keys, dim=-1, eps=1e-8)  # (B, S)
            return cos * self.log_scale.exp()
        scores = torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1)  # (B, S)
        if self.score_name == "scaled_dot":
            scores = scores / math.sqrt(query.shape[-1])
        return scores

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, src_pad_mask: Tensor) -> tuple[Tensor, Tensor]:
        """query (B, Q), keys (B, S, A), values (B, S, M), src_pad_mask (B, S) -> context (B, M), weights (B, S)."""
        weights = masked_softmax(self.score(query, keys), src_pad_mask)  # (B, S)
        context = torch.bmm(weights.unsqueeze(1), values).squeeze(1)  # (B, M)
        return context, weights
