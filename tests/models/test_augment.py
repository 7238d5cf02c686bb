from __future__ import annotations

from models.augment import augment_names
from models.data import Pair
from models.names import SUBSTITUTES

PAIRS = [
    Pair("Tom chases the cat.", "汤姆追猫。", "a"),
    Pair("Mary is here.", "玛丽在这里。", "b"),
    Pair("Tomorrow is Sunday.", "明天是星期天。", "c"),  # "Tom" inside a word: never replaced
    Pair("Tom is here.", "他在这里。", "d"),  # the Chinese side lacks 汤姆: skipped
]


def test_names_are_replaced_on_both_sides_consistently() -> None:
    extra = augment_names(PAIRS, fraction=1.0, seed=0)
    assert len(extra) == 2
    for pair, original in zip(extra, PAIRS[:2], strict=True):
        [new_en] = [name for name in SUBSTITUTES if name in pair.en]
        assert SUBSTITUTES[new_en] in pair.zh
        assert "汤姆" not in pair.zh and "玛丽" not in pair.zh
        assert pair.attribution == original.attribution  # derived pairs keep their attribution


def test_deterministic_and_off_by_default() -> None:
    assert augment_names(PAIRS, 1.0, seed=3) == augment_names(PAIRS, 1.0, seed=3)
    assert augment_names(PAIRS, 0.0, seed=3) == []
