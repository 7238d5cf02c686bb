"""Name augmentation: copies of training pairs with Tom/汤姆 or Mary/玛丽 replaced by another name.

The corpus names almost everyone Tom or Mary, so a model trained on it has never seen most
names (there is no Jerry at all). A copy of a fraction of the name-bearing pairs, with the name
replaced consistently on both sides, teaches the model to carry names across. Only the training
split is augmented; dev and test stay as the corpus gives them.
"""

from __future__ import annotations

import random
import re

from models.data import Pair
from models.names import SUBSTITUTES

REPLACEABLE = {"Tom": "汤姆", "Mary": "玛丽"}


def augment_names(pairs: list[Pair], fraction: float, seed: int) -> list[Pair]:
    """Extra pairs: for `fraction` of the pairs holding a replaceable name on both sides, one copy
    with that name replaced by a random substitute. Deterministic for a seed."""
    if fraction <= 0:
        return []
    rng = random.Random(seed)
    extra = []
    for pair in pairs:
        for en_name, zh_name in REPLACEABLE.items():
            pattern = rf"(?<![A-Za-z]){en_name}(?![A-Za-z])"
            if zh_name in pair.zh and re.search(pattern, pair.en) and rng.random() < fraction:
                new_en, new_zh = rng.choice(sorted(SUBSTITUTES.items()))
                extra.append(Pair(re.sub(pattern, new_en, pair.en), pair.zh.replace(zh_name, new_zh), pair.attribution))
                break
    return extra
