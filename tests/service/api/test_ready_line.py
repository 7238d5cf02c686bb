"""The "ready" log line's account of what each model's graphs fused: an operator reads it to see an
install without the operator library, or a setting that turned a fusion off."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from service.api.app import fused_operators


def catalog(fused: dict[str, dict[str, dict[str, int]]]) -> Any:
    return SimpleNamespace(models={name: SimpleNamespace(model=SimpleNamespace(fused=f)) for name, f in fused.items()})


def test_each_models_operators_are_listed_by_graph() -> None:
    line = fused_operators(catalog({
        "zh-en": {"decoder": {"CacheAttention": 3, "CrossAttention": 3}},
        "en-zh": {"encoder": {"RowDequant": 24, "RowQuant": 13}, "decoder": {"CacheAttention": 3}},
        "en-zh-rnn": {},
    }))  # fmt: skip
    assert line == (
        "en-zh (encoder: 24 RowDequant, 13 RowQuant / decoder: 3 CacheAttention); "
        "zh-en (decoder: 3 CacheAttention, 3 CrossAttention)"
    )


def test_nothing_fused_says_so() -> None:
    assert fused_operators(catalog({"en-zh": {}})).startswith("none")
