"""The default bundles shipped in bundles/ (issue 5): real translators with attention that means
something. Skipped while bundles/ holds no bundle."""

from __future__ import annotations

import asyncio

import pytest

from service.engine.bundle import load_bundle
from service.engine.catalog import Catalog
from service.engine.onnx_model import SessionConfig
from service.engine.requests import TranslateRequest
from service.engine.service import TranslationService
from service.settings import DEFAULT_BUNDLES, Settings

SHIPPED = sorted(p.parent.name for p in DEFAULT_BUNDLES.glob("*/manifest.json")) if DEFAULT_BUNDLES.is_dir() else []
pytestmark = pytest.mark.skipif(not SHIPPED, reason="no default bundles committed yet")
BLEU_BARS = {"en-zh": 20.0, "zh-en": 20.0, "en-zh-rnn": 15.0}


def translate(name: str, text: str) -> dict:
    settings = Settings(bundles=DEFAULT_BUNDLES)
    service = TranslationService(Catalog.load(DEFAULT_BUNDLES, SessionConfig()), settings)

    async def run() -> dict:
        service.batcher.start()
        try:
            return (await service.translate(TranslateRequest([text], model=name)))["translations"][0]
        finally:
            await service.batcher.stop()

    return asyncio.run(run())


@pytest.mark.parametrize("name", SHIPPED)
def test_bundle_is_valid_and_meets_its_bar(name: str) -> None:
    manifest = load_bundle(DEFAULT_BUNDLES / name).manifest
    assert manifest.parity.passed
    beam4 = [q for q in manifest.quality if q.beam == 4 and q.split == "test"]
    assert beam4 and beam4[0].bleu >= BLEU_BARS.get(name, 0.0)
    if manifest.quantization.mode == "int8":
        assert manifest.quantization.bleu_delta is not None and manifest.quantization.bleu_delta >= -1.0


def _argmax_source(t: dict, zh: str) -> str:
    """The source token that the first target token of `zh` attends to most (default view)."""
    start = t["text"].index(zh)
    row = next(i for i, tok in enumerate(t["target_tokens"]) if tok["start"] <= start < tok["end"])
    best = max(range(len(t["source_tokens"])), key=lambda j: t["attention"][row][j])
    return str(t["source_tokens"][best]["text"])


@pytest.mark.parametrize("name", [n for n in SHIPPED if n.startswith("en-zh")])
def test_tom_attends_to_tom(name: str) -> None:
    """The tutorial's example, first half: 汤姆's row puts its largest weight on "Tom"."""
    t = translate(name, "Tom chases Jerry.")
    assert "汤姆" in t["text"]
    assert _argmax_source(t, "汤姆") == "Tom"


@pytest.mark.xfail(
    strict=True,
    reason="the corpus has no Jerry/杰瑞 pair, so the model cannot write 杰瑞 yet; issue 5's retraining adds "
    "name-substitution pairs (strict: this fails as soon as it passes, so the marker gets removed)",
)
@pytest.mark.parametrize("name", [n for n in SHIPPED if n.startswith("en-zh")])
def test_jerry_attends_to_jerry(name: str) -> None:
    """The tutorial's example, second half: 杰瑞's row puts its largest weight on "Jerry"."""
    t = translate(name, "Tom chases Jerry.")
    assert "杰瑞" in t["text"]
    assert "Jerry".startswith(_argmax_source(t, "杰瑞"))


def test_every_default_bundle_aligns_names() -> None:
    for name in SHIPPED:
        view = load_bundle(DEFAULT_BUNDLES / name).manifest.attention_view
        assert view.name_alignment_accuracy is not None and view.name_alignment_cases > 0
