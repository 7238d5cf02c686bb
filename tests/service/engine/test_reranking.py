"""A request's `rerank` on the shipped pair: the n-best of zh-en (or en-zh) reranked by the other
direction, as benchmarks.channel_rerank measured it, the same alone and batched, and the same
translation in /v1/attention's introspection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from benchmarks.channel_rerank import candidates, reranked, search
from service.api.app import build_service
from service.engine.catalog import Catalog
from service.engine.errors import InvalidRequest
from service.engine.onnx_model import SessionConfig
from service.engine.requests import IntrospectRequest, TranslateRequest
from service.engine.reranking import N_BEST, ChannelWork, channel_scores, channel_scores_together
from service.engine.service import TranslationService
from service.settings import DEFAULT_BUNDLES, Settings

T = TypeVar("T")
ZH = ["汤姆喜欢茶。", "玛丽上周去上海看望她的祖母。", "车站在哪里？", "我不知道他为什么没来。"]


def served(call: Callable[[TranslationService], Awaitable[T]]) -> T:
    """`call` on a service of the shipped bundles, its scheduler running."""
    service = build_service(Catalog.load(DEFAULT_BUNDLES, SessionConfig()), Settings(bundles=DEFAULT_BUNDLES))

    async def run() -> T:
        service.scheduler.start()
        try:
            return await call(service)
        finally:
            await service.scheduler.stop()

    return asyncio.run(run())


def test_rerank_picks_what_the_benchmark_measured_alone_and_batched() -> None:
    async def run(service: TranslationService) -> None:
        forward, reverse = service.catalog.get("zh-en"), service.catalog.get("en-zh")
        expected = reranked(candidates(forward, reverse, ZH, N_BEST), forward.manifest.search.rerank_weight)
        batched = await service.translate(TranslateRequest(ZH, model="zh-en", rerank=True))
        assert [t.best.text for t in batched] == expected
        for text, together in zip(ZH, batched, strict=True):
            [alone] = await service.translate(TranslateRequest([text], model="zh-en", rerank=True))
            assert alone.best.text == together.best.text
            assert alone.best.score == together.best.score  # the reverse model's scores too
        [two] = await service.translate(TranslateRequest(ZH[:1], model="zh-en", n_best=2, rerank=True))
        assert len(two.alternatives) == 1  # the n_best asked for, not the 8 reranked

    served(run)


def test_requests_scored_together_score_as_alone_and_concurrent_requests_match() -> None:
    async def run(service: TranslationService) -> None:
        forward, reverse = service.catalog.get("zh-en"), service.catalog.get("en-zh")
        nbests = search(forward, forward.source_ids(ZH), forward.options(beam_size=2, n_best=2))
        works = [ChannelWork(forward, reverse, ZH[:1], nbests[:1]), ChannelWork(forward, reverse, ZH[1:], nbests[1:])]
        together = channel_scores_together(works)
        assert together == [channel_scores(forward, reverse, w.sources, w.nbests) for w in works]  # bit for bit
        with pytest.raises(ValueError, match="share their models"):
            channel_scores_together([works[0], ChannelWork(reverse, forward, ["Hi."], [nbests[0]])])
        batched = await service.translate(TranslateRequest(ZH, model="zh-en", rerank=True))
        requests = [service.translate(TranslateRequest([text], model="zh-en", rerank=True)) for text in ZH]
        concurrent = [t for [t] in await asyncio.gather(*requests)]  # scored together or not, as the queue has it
        assert [(t.best.text, t.best.score) for t in concurrent] == [(t.best.text, t.best.score) for t in batched]

    served(run)


def test_introspection_shows_the_reranked_translation() -> None:
    async def run(service: TranslationService) -> None:
        text = ZH[1]
        [t] = await service.translate(TranslateRequest([text], model="zh-en", rerank=True))
        seen = await service.introspect(IntrospectRequest(text, model="zh-en", rerank=True))
        assert seen.best.text == t.best.text
        with pytest.raises(InvalidRequest, match="forced_target"):
            await service.introspect(IntrospectRequest(text, forced_target="Hi.", model="zh-en", rerank=True))

    served(run)
