"""The default bundles shipped in bundles/ (issue 5): real translators with attention that means
something. Skipped while bundles/ holds no bundle."""

from __future__ import annotations

import asyncio

import pytest

from service.api.app import build_service
from service.api.presentation import translation_json
from service.engine.bundle import load_bundle
from service.engine.catalog import Catalog
from service.engine.onnx_model import SessionConfig
from service.engine.requests import TranslateRequest
from service.settings import DEFAULT_BUNDLES, Settings

SHIPPED = sorted(p.parent.name for p in DEFAULT_BUNDLES.glob("*/manifest.json")) if DEFAULT_BUNDLES.is_dir() else []
pytestmark = pytest.mark.skipif(not SHIPPED, reason="no default bundles committed yet")
BLEU_BARS = {"en-zh": 20.0, "zh-en": 20.0, "en-zh-rnn": 15.0}


def translate(name: str, text: str) -> dict:
    settings = Settings(bundles=DEFAULT_BUNDLES)
    service = build_service(Catalog.load(DEFAULT_BUNDLES, SessionConfig()), settings)

    async def run() -> dict:
        service.scheduler.start()
        try:
            return translation_json((await service.translate(TranslateRequest([text], model=name)))[0])
        finally:
            await service.scheduler.stop()

    return asyncio.run(run())


@pytest.mark.parametrize("name", SHIPPED)
def test_bundle_is_valid_and_meets_its_bar(name: str) -> None:
    manifest = load_bundle(DEFAULT_BUNDLES / name).manifest
    assert manifest.parity.passed
    beam4 = [q for q in manifest.quality if q.beam == 4 and q.split == "test"]
    assert beam4 and beam4[0].bleu >= BLEU_BARS.get(name, 0.0)
    if manifest.quantization.mode == "int8":
        assert manifest.quantization.bleu_delta is not None and manifest.quantization.bleu_delta >= -1.0


def _attends_to(t: dict, zh: str, en: str, source: str) -> bool:
    """Whether the first target token of `zh` puts its largest weight (default view) on a source
    piece of the word `en`: a name may be several pieces ("Je", "rry"); any of them counts."""
    start = t["text"].index(zh)
    row = next(i for i, tok in enumerate(t["target_tokens"]) if tok["start"] <= start < tok["end"])
    best = max(range(len(t["source_tokens"])), key=lambda j: t["attention"][row][j])
    piece = t["source_tokens"][best]
    word_start = source.index(en)
    return bool(word_start <= piece["start"] and piece["end"] <= word_start + len(en) and piece["end"] > piece["start"])


SEED = "Tom chases Jerry."


EN_ZH = [n for n in SHIPPED if n.startswith("en-zh")]


@pytest.mark.parametrize("name", EN_ZH)
def test_the_tutorial_example_attends_to_the_names(name: str) -> None:
    """The tutorial example: 汤姆 ... 杰瑞, and each name's first token attends most to its English name."""
    t = translate(name, SEED)
    assert "汤姆" in t["text"] and "杰瑞" in t["text"], t["text"]
    assert _attends_to(t, "汤姆", "Tom", SEED)
    assert _attends_to(t, "杰瑞", "Jerry", SEED)


def test_every_default_bundle_aligns_names() -> None:
    for name in SHIPPED:
        view = load_bundle(DEFAULT_BUNDLES / name).manifest.attention_view
        assert view.name_alignment_accuracy is not None and view.name_alignment_cases > 0
