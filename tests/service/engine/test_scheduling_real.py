"""The scheduler over the shipped bundles: a sentence gets the same tokens and scores alone as when
it starts while other cohorts are mid-decode, mixed with other sentences, greedy and beam. With
`express_tokens` a short one ("Yes.") that arrives while the long one decodes goes first, apart;
the others join it.

Whatever the timing, the assertion is the same (that is the property), so the test cannot flake."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from service.api.app import build_service
from service.engine.catalog import Catalog
from service.engine.onnx_model import SessionConfig
from service.engine.search import Hypothesis
from service.settings import DEFAULT_BUNDLES, Settings

SHIPPED = sorted(p.parent.name for p in DEFAULT_BUNDLES.glob("*/manifest.json")) if DEFAULT_BUNDLES.is_dir() else []
pytestmark = pytest.mark.skipif(not SHIPPED, reason="no default bundles committed yet")

SOURCES = {
    "en": [
        "Tom chases Jerry.",
        "I don't know what to do.",
        "The meeting was postponed because the chairman was ill, and nobody knew when it would resume.",
        "Yes.",
        "Where is the train station?",
        "She has lived in this small town by the river for more than twenty years.",
    ],
    "zh": [
        "汤姆在追杰瑞。",
        "我不知道该怎么办。",
        "因为主席病了，会议被推迟了，没有人知道什么时候会恢复。",
        "是的。",
        "火车站在哪里？",
        "她在河边这个小镇上住了二十多年。",
    ],
}


def same(alone: Hypothesis, other: Hypothesis) -> bool:
    """Same tokens, score and attention (a batch pads the source: its extra columns are exactly 0)."""
    S = alone.attention.shape[-1]
    padding = other.attention[..., S:]
    attention_same = np.array_equal(alone.attention, other.attention[..., :S]) and not padding.any()
    return alone.tokens == other.tokens and alone.score == other.score and attention_same


@pytest.mark.parametrize("beam", [1, 4])
def test_results_do_not_depend_on_what_else_is_decoding(beam: int) -> None:
    catalog = Catalog.load(DEFAULT_BUNDLES, SessionConfig())
    settings = Settings(bundles=DEFAULT_BUNDLES, max_cohorts=3, max_batch_size=4, express_tokens=8)
    service = build_service(catalog, settings)

    async def run(name: str, options: object, ids: list[list[int]]) -> list[list[list[Hypothesis]]]:
        key = (name, options)
        long = asyncio.ensure_future(service.scheduler.submit(key, [ids[2]] * 3))  # decoding when the rest arrive
        others = []
        for sentence in ids:
            await asyncio.sleep(0)  # let the inference thread take steps in between
            others.append(asyncio.ensure_future(service.scheduler.submit(key, [sentence])))
        mixed = asyncio.ensure_future(service.scheduler.submit(key, list(reversed(ids))))
        return [await long, *[await o for o in others], await mixed]

    async def main() -> None:
        service.scheduler.start()
        try:
            for name in SHIPPED:
                translator = catalog.get(name)
                eos = translator.manifest.special_ids.eos
                ids = [[*i, eos] for i in translator.src_tokenizer.encode_ids(SOURCES[translator.manifest.source_lang])]
                options = translator.options(beam_size=beam)
                alone = [translator.search_ids([i], options)[0][0] for i in ids]
                long, *singles, mixed = await run(name, options, ids)
                assert all(same(alone[2], h[0]) for h in long), name
                assert all(same(a, h[0][0]) for h, a in zip(singles, alone, strict=True)), name
                assert all(same(a, h[0]) for h, a in zip(mixed, reversed(alone), strict=True)), name
        finally:
            await service.scheduler.stop()

    asyncio.run(main())
