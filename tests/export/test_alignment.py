"""Name alignment accuracy and the default attention view it chooses."""

from __future__ import annotations

from pathlib import Path

import pytest

from export.alignment import choose_view, find_cases
from service.engine.bundle import load_bundle
from service.engine.translator import Translator


def test_the_bundle_records_its_default_view_and_the_accuracy_per_view(bundle_dir: Path) -> None:
    view = load_bundle(bundle_dir / "en-zh").manifest.attention_view
    assert view.name_alignment_cases > 0
    assert set(view.accuracy_by_view) == {"layer 0 mean", "layer 0 head 0", "layer 0 head 1"}
    assert view.name_alignment_accuracy == max(view.accuracy_by_view.values())
    assert all(0.0 <= a <= 1.0 for a in view.accuracy_by_view.values())


def test_cases_point_at_the_name_tokens(bundle_dir: Path) -> None:
    translator = Translator(load_bundle(bundle_dir / "en-zh"))
    [case] = find_cases(translator, [("Yesterday Mary slept.", "昨天玛丽睡了。")])
    source = translator.src_tokenizer.encode("Yesterday Mary slept.")
    covered = "".join(source.text[source.offsets[j][0] : source.offsets[j][1]] for j in sorted(case.columns))
    assert "Mary" in covered and "slept" not in covered
    target = translator.tgt_tokenizer.encode("昨天玛丽睡了。")
    s, e = target.offsets[case.row]
    assert "玛" in target.text[s:e]


def test_pairs_without_both_forms_are_skipped(bundle_dir: Path) -> None:
    translator = Translator(load_bundle(bundle_dir / "en-zh"))
    assert find_cases(translator, [("Tom sleeps.", "他睡了。"), ("Tomorrow.", "汤姆。")]) == []


@pytest.mark.parametrize(
    ("accuracy", "expected"),
    [
        ({"layer 0 mean": 0.5, "layer 0 head 1": 0.9, "layer 1 mean": 0.7}, (0, 1)),
        ({"layer 0 mean": 0.9, "layer 0 head 1": 0.9}, (0, "mean")),  # a tie goes to the mean
        ({"layer 0 mean": 0.8, "layer 2 mean": 0.8}, (2, "mean")),  # and to the later layer
    ],
)
def test_choose_view(accuracy: dict[str, float], expected: tuple[int, object]) -> None:
    view = choose_view(accuracy, cases=10)
    assert (view.layer, view.heads) == expected
    assert view.name_alignment_accuracy == max(accuracy.values()) and view.name_alignment_cases == 10


def test_no_cases_keeps_the_last_layer_mean() -> None:
    view = choose_view({}, cases=0)
    assert (view.layer, view.heads, view.name_alignment_accuracy) == (-1, "mean", None)
