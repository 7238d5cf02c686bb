from __future__ import annotations

import random

import torch

from models.batching import make_batches, pad


def lengths(n: int = 500, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        src = rng.randint(2, 40)
        out.append((src, max(2, src + rng.randint(-4, 4))))  # target lengths follow the source's
    return out


def test_every_pair_once_and_within_budget() -> None:
    lens = lengths()
    batches = make_batches(lens, batch_tokens=600, seed=1)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lens)))
    for b in batches:
        padded = (max(lens[i][0] for i in b) + max(lens[i][1] for i in b)) * len(b)
        assert padded <= 600 or len(b) == 1


def test_batches_group_similar_lengths() -> None:
    lens = lengths()
    batches = make_batches(lens, batch_tokens=600, seed=1)
    padded = sum((max(lens[i][0] for i in b) + max(lens[i][1] for i in b)) * len(b) for b in batches)
    real = sum(s + t for s, t in lens)
    assert real / padded > 0.85  # little padding


def test_deterministic_per_seed() -> None:
    lens = lengths()
    assert make_batches(lens, 600, seed=3) == make_batches(lens, 600, seed=3)
    assert make_batches(lens, 600, seed=3) != make_batches(lens, 600, seed=4)


def test_a_pair_over_the_budget_gets_its_own_batch() -> None:
    batches = make_batches([(5, 5), (300, 300), (5, 5)], batch_tokens=100, seed=0)
    assert [1] in batches


def test_pad() -> None:
    ids, mask = pad([[5, 6, 3], [7, 3]])
    assert ids.tolist() == [[5, 6, 3], [7, 3, 0]]
    assert mask.tolist() == [[False, False, False], [False, False, True]]
    assert ids.dtype == torch.long
