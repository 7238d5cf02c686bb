"""benchmarks.channel_rerank on the shipped zh-en and en-zh: the batched reverse scores are the ones
forced decoding gives one pair at a time, and weight 0 keeps the forward search's choice."""

from __future__ import annotations

import pytest

from benchmarks.channel_rerank import candidates, chosen, measure, reranked
from models.data import Pair
from service.engine.bundle import load_bundle
from service.engine.introspection import force
from service.engine.reranking import forced_log_probs
from service.engine.translator import Translator
from service.settings import DEFAULT_BUNDLES

PAIRS = [
    Pair("Tom likes tea.", "汤姆喜欢茶。", ""),
    Pair("Where is the station?", "车站在哪里？", ""),
    Pair("Mary went to Shanghai last week to see her grandmother.", "玛丽上周去上海看望她的祖母。", ""),
    Pair("I don't know.", "我不知道。", ""),
    Pair("The government said the new law will take effect next year.", "政府表示，新法律将于明年生效。", ""),
]


@pytest.fixture(scope="module")
def translators() -> tuple[Translator, Translator]:
    return Translator(load_bundle(DEFAULT_BUNDLES / "zh-en")), Translator(load_bundle(DEFAULT_BUNDLES / "en-zh"))


def test_batched_reverse_scores_are_forced_decodings_log_probs(translators: tuple[Translator, Translator]) -> None:
    _, reverse = translators
    eos = reverse.manifest.special_ids.eos
    src = reverse.source_ids([p.en for p in PAIRS])
    tgt = [[*ids, eos] for ids in reverse.tgt_tokenizer.encode_ids([p.zh for p in PAIRS])]
    batched = forced_log_probs(reverse, src, tgt)
    for i in range(len(PAIRS)):
        alone = float(force(reverse, src[i], tgt[i])["log_probs"].sum())
        assert batched[i] == pytest.approx(alone, abs=1e-6)


def test_weight_zero_keeps_the_forward_choice_and_the_table_has_every_setting(
    translators: tuple[Translator, Translator],
) -> None:
    forward, reverse = translators
    sources = [p.zh for p in PAIRS]
    cands = candidates(forward, reverse, sources, 4)
    assert all(len(cs) == 4 and all(c.channel < 0 for c in cs) for cs in cands)
    top = [c[0].text for c in cands]
    assert reranked(cands, 0.0) == top  # the search's best first, and nothing else counts
    assert reranked(cands, 1.5)[0] == "Tom likes tea."
    result = measure(forward, reverse, PAIRS, (2,))
    assert "beam 4" in result["bleu"] and "n-best 2, weight 1.5" in result["bleu"]
    assert chosen({"bleu": {"beam 4": {"bleu": 99.0}, "n-best 8, weight 1.5": {"bleu": 30.0}}}) == (8, 1.5)
