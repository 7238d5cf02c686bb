"""Length-bucketed batches under a token budget, and padding into tensors.

Pairs are sorted by length (ties broken at random per epoch) and cut into batches whose padded
size, (longest source + longest target) * rows, stays under the budget; the batch order is then
shuffled. Similar lengths in a batch keep padding, and so wasted compute, low.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from service.engine.tokenizer import PAD_ID


def make_batches(lengths: list[tuple[int, int]], batch_tokens: int, seed: int) -> list[list[int]]:
    """Indices of pairs grouped into batches; deterministic for a given seed."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    order.sort(key=lambda i: lengths[i])  # stable: the shuffle breaks ties
    batches: list[list[int]] = []
    current: list[int] = []
    longest_src = longest_tgt = 0
    for i in order:
        src_len, tgt_len = lengths[i]
        grown_src, grown_tgt = max(longest_src, src_len), max(longest_tgt, tgt_len)
        if current and (grown_src + grown_tgt) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, grown_src, grown_tgt = [], src_len, tgt_len
        current.append(i)
        longest_src, longest_tgt = grown_src, grown_tgt
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def pad(sequences: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Right-pad id lists -> ids (B, S) and pad mask (B, S), True = padding."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), PAD_ID, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return ids, ids.eq(PAD_ID)
