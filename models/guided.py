"""Guided alignment: a loss that pulls one attention head towards word alignments (Garg et al. 2019).

For every target token with at least one link, the head's attention row is compared with the
uniform distribution over its linked source tokens by cross-entropy, averaged over those tokens.
Tokens without a link are left free, so the head learns the rest from translation alone.
"""

from __future__ import annotations

import torch
from torch import Tensor

from models.alignments import Link

EPS = 1e-6  # keeps log finite where a masked row gives exactly 0


def alignment_targets(links: list[list[Link]], src_len: int, tgt_len: int) -> Tensor:
    """Row-normalised link matrices, (B, T, S); rows of unlinked target tokens are all zero."""
    target = torch.zeros(len(links), tgt_len, src_len)
    for b, pair in enumerate(links):
        for s, t in pair:
            if s < src_len and t < tgt_len:
                target[b, t, s] = 1.0
    return target / target.sum(-1, keepdim=True).clamp(min=1.0)


def guided_loss(cross_attention: Tensor, targets: Tensor, layer: int, head: int) -> Tensor:
    """Cross-entropy of one head's rows against the link distributions.

    cross_attention: (B, L, H, T, S); targets: (B, T, S)."""
    weights = cross_attention[:, layer, head]  # (B, T, S)
    linked = targets.sum(-1) > 0  # (B, T)
    if not bool(linked.any()):
        return weights.sum() * 0.0
    per_token = -(targets * torch.log(weights + EPS)).sum(-1)  # (B, T)
    return per_token[linked].mean()
