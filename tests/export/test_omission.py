"""The omission measure: which source words a translation dropped, and how the flag scores on them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from export.omission import (
    Case,
    Example,
    cases_of,
    choose_threshold,
    measure,
    precision_recall,
    words,
    write_flag,
)
from models.data import Pair
from service.api.app import build_service
from service.engine.attention_view import Token
from service.engine.bundle import load_bundle
from service.engine.catalog import Catalog
from service.engine.manifest import OmissionFlag
from service.engine.onnx_model import SessionConfig
from service.engine.results import Rendered, Signals
from service.engine.validation import Limits, unattended_threshold
from service.settings import Settings
from tests.support.synthetic import synthetic_pairs


def rendered(text: str, source: list[Token], coverage: list[float]) -> Rendered:
    signals = Signals(coverage, [], [], 0.2, 0.0)
    return Rendered(text, 0.0, True, source, [], np.zeros((0, len(source)), np.float32), signals)


def test_words_skip_punctuation_in_both_languages() -> None:
    assert [w.text for w in words("Tom's 3 cats, 4.5 kg!", "en")] == ["Tom's", "3", "cats", "4.5", "kg"]
    zh = words("汤姆追杰瑞。", "zh")
    assert "".join(w.text for w in zh) == "汤姆追杰瑞"
    assert all("汤姆追杰瑞。"[w.span[0] : w.span[1]] == w.text for w in zh)


def test_a_word_is_dropped_only_when_neither_its_reference_word_nor_a_link_reaches_the_translation() -> None:
    source = words("Tom chases Jerry quickly.", "en")
    reference = words("汤姆 快速 追 杰瑞", "zh")  # spaces: one jieba word each
    to_ref = {(0, 0), (1, 2), (2, 3), (3, 1)}
    tokens = [Token("▁Tom", 0, 3), Token("▁chases", 4, 10), Token("▁Jerry", 11, 16), Token("▁quickly", 17, 24)]
    translation = rendered("汤姆赶杰", tokens, [1.0, 0.9, 0.05, 0.6])
    to_hyp = {(1, 1)}  # the aligner links "chases" to 赶, a word the reference does not use
    cases = cases_of(Example(source, reference, to_ref, translation, to_hyp), "en", "zh")
    assert cases == [Case(1.0, False), Case(0.9, False), Case(0.05, True), Case(0.6, True)]


def test_precision_and_recall_per_threshold() -> None:
    cases = [Case(0.05, True), Case(0.15, False), Case(0.25, True), Case(1.0, False), Case(0.9, True)]
    rows = {r["threshold"]: r for r in precision_recall(cases)}
    assert rows[0.1] == {
        "threshold": 0.1,
        "flagged": 1,
        "precision": 1.0,
        "recall": 0.333,
        "f1": 0.5,
        "false_positive_rate": 0.0,
        "j": 0.333,
    }
    assert rows[0.3]["flagged"] == 3 and rows[0.3]["precision"] == 0.667 and rows[0.3]["recall"] == 0.667
    assert rows[0.05]["flagged"] == 0 and rows[0.05]["f1"] == 0.0


def test_the_threshold_is_the_one_that_separates_best_and_none_when_the_flag_is_chance() -> None:
    telling = [Case(0.05, True), Case(0.08, True), Case(0.5, False), Case(0.9, False), Case(0.35, True)]
    assert choose_threshold(precision_recall(telling)) == 0.4  # every drop flagged, no kept word
    chance = [Case(0.05, True), Case(0.05, False), Case(0.9, True), Case(0.9, False)]
    assert choose_threshold(precision_recall(chance)) == 0.0  # flag nothing


def test_measure_chooses_on_dev_writes_the_manifest_and_the_service_uses_it(bundle_dir: Path, tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    shutil.copytree(bundle_dir / "en-zh", bundles / "en-zh")
    pairs = [Pair(en, zh, "") for en, zh in synthetic_pairs()]
    cases = measure(bundles, "en-zh", ("en", "zh"), {"dev": pairs[:20], "test": pairs[20:40]}, pairs[40:])
    assert set(cases) == {"dev", "test"} and len(cases["test"]) > 20
    flagged = [row["flagged"] for row in precision_recall(cases["test"])]
    assert flagged == sorted(flagged)  # a higher threshold flags a superset
    flag = OmissionFlag(threshold=0.37, precision=0.5, recall=0.25, dropped_share=0.1, content_words=9, measured_on="x")
    write_flag(bundles / "en-zh", flag)
    assert load_bundle(bundles / "en-zh").manifest.attention_view.omission == flag
    service = build_service(Catalog.load(bundles, SessionConfig()), Settings(bundles=bundles))
    translator = service.catalog.models["en-zh"]
    assert unattended_threshold(service.limits, translator) == 0.37
    assert unattended_threshold(Limits(unattended_threshold=0.1), translator) == 0.1  # the setting wins
