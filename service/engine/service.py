"""The translation service's core: which model, check, cut into pieces, batch, decode, render.

It answers typed results (service/engine/results.py) and raises domain errors; it knows nothing
of HTTP. A text is translated as the pieces the segmenter cuts it into (sentences, and clauses
of over-long sentences), decoded as rows of one batch and joined back into one translation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import numpy.typing as npt

from service.engine.catalog import Catalog
from service.engine.errors import TEXT, InvalidRequest, Subject, UnsupportedPair
from service.engine.introspection import force
from service.engine.joining import join
from service.engine.language import detect, mismatch
from service.engine.rendering import PieceView, block_diagonal, combine, rendered, view_piece
from service.engine.requests import AttentionOptions, IntrospectRequest, TranslateRequest
from service.engine.reranking import N_BEST, ChannelWork, Rerank, channel_scores_together, reranked
from service.engine.results import Detection, Introspection, Notice, Rendered, SegmentSpan, TextTranslation
from service.engine.scheduler import Scheduler, SchedulerConfig, Stepper
from service.engine.search import Hypothesis
from service.engine.translator import SearchOptions, Translator
from service.engine.validation import (
    Limits,
    PreparedText,
    attention_view,
    check_cells,
    check_count,
    check_pieces,
    indices,
    prepare,
    search_options,
    tokenize_within,
    unattended_threshold,
    whole,
)

AUTO = "auto"


@dataclass(frozen=True)
class _Job:
    """One text of a request, ready to decode."""

    translator: Translator
    prepared: PreparedText
    options: SearchOptions
    view: AttentionOptions
    warnings: list[Notice]
    detected: Detection | None
    rerank: Rerank | None = None

    @property
    def n_best(self) -> int:
        """Hypotheses the caller gets (a reranked search decodes more)."""
        return self.rerank.keep if self.rerank else self.options.n_best


class TranslationService:
    def __init__(
        self,
        catalog: Catalog,
        limits: Limits,
        scheduling: SchedulerConfig,
        on_batch: Callable[[int], None] | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.catalog, self.limits = catalog, limits
        self.scheduler: Scheduler[list[Hypothesis]] = Scheduler(
            self._start_cohort,
            scheduling,
            on_batch or (lambda n: None),
            on_fatal or (lambda exc: None),
            group=lambda key: cast(tuple[str, SearchOptions], key)[0],  # (model, search options)
            wide=lambda key: cast(tuple[str, SearchOptions], key)[1].beam_size > 1,
        )

    # 0) which model
    def resolve(self, model: str | None, source: str | None, target: str | None) -> Translator:
        if model is not None:
            return self.catalog.get(model)
        if source is None or target is None:
            raise InvalidRequest("give either model, or both source and target", field="model")
        return self.catalog.for_pair(source, target)

    def resolve_for(
        self, text: str, model: str | None, source: str | None, target: str | None, subject: Subject
    ) -> tuple[Translator, Detection | None, list[Notice]]:
        """The model for one text: named, the pair's default, or (source "auto") by its language.
        A text that looks like another language than its source gets a warning, not an error."""
        if source != AUTO or model is not None:
            translator = self.resolve(model, source, target)
            notice = mismatch(text, translator.manifest.source_lang, subject)
            return translator, None, [notice] if notice else []
        if target is None:
            raise InvalidRequest('"source": "auto" needs a target language', field="target")
        candidates = sorted(s for s, t in self.catalog.defaults if t == target)
        if not candidates:
            pairs = ", ".join(self.catalog.pairs())
            raise UnsupportedPair(f"no model translates into {target}; supported pairs: {pairs}", field="target")
        detected = detect(text, candidates) or Detection(candidates[0], 0.0)
        return self.catalog.for_pair(detected.language, target), detected, []

    # 1) check each text and cut it into pieces
    def _job(self, request: TranslateRequest, i: int, text: str) -> _Job:
        subject = Subject("texts", i)
        translator, detected, warnings = self.resolve_for(text, request.model, request.source, request.target, subject)
        prepared = prepare(translator, text, subject, self.limits)
        options = search_options(translator, request, self.limits)
        options, rerank = self._with_rerank(translator, options, request.rerank)
        view = attention_view(translator, request.attention)
        return _Job(translator, prepared, options, view, warnings, detected, rerank)

    def _with_rerank(
        self, translator: Translator, options: SearchOptions, asked: bool
    ) -> tuple[SearchOptions, Rerank | None]:
        """The search to run, and how its n-best is reranked (by the default model of the opposite
        direction) when `asked`: N_BEST hypotheses from a beam at least as wide."""
        if not asked:
            return options, None
        m = translator.manifest
        if self.limits.max_beam_size < N_BEST:
            message = f"rerank searches a beam of {N_BEST}; this service allows beams up to {self.limits.max_beam_size}"
            raise InvalidRequest(message, field="rerank", limit=self.limits.max_beam_size)
        try:
            reverse = self.catalog.for_pair(m.target_lang, m.source_lang)
        except UnsupportedPair as exc:
            message = f"rerank needs a model of the opposite direction ({m.target_lang}-{m.source_lang}): {exc}"
            raise InvalidRequest(message, field="rerank") from exc
        n = max(N_BEST, options.n_best)
        wider = replace(options, beam_size=max(options.beam_size, n), n_best=n)
        return wider, Rerank(reverse, m.search.rerank_weight, options.n_best)

    # 2) decode every piece, batched with other requests
    async def translate(self, request: TranslateRequest) -> list[TextTranslation]:
        check_count(len(request.texts), self.limits)
        jobs = [self._job(request, i, text) for i, text in enumerate(request.texts)]
        check_pieces(sum(len(j.prepared.pieces) for j in jobs), self.limits)
        self._check_translate_size(jobs)
        results = await self._decode([(j.translator, j.options, j.prepared) for j in jobs])
        # only texts that asked: the default path adds no task per text
        reranking = {
            k: self._reranked(j.translator, j.rerank, j.prepared, results[k]) for k, j in enumerate(jobs) if j.rerank
        }
        if reranking:
            for k, nbests in zip(reranking, await asyncio.gather(*reranking.values()), strict=True):
                results[k] = nbests
        return [self._finish(job, hyps) for job, hyps in zip(jobs, results, strict=True)]

    async def _decode(self, work: list[tuple[Translator, SearchOptions, PreparedText]]) -> list[list[list[Hypothesis]]]:
        """n-best hypotheses of every piece of every text; texts sharing a model and options share batches."""
        groups: dict[Hashable, list[int]] = {}
        for i, (translator, options, _) in enumerate(work):
            groups.setdefault((translator.manifest.name, options), []).append(i)
        results: list[list[list[Hypothesis]]] = [[] for _ in work]

        async def run(key: Hashable, members: list[int]) -> None:
            translator = work[members[0]][0]
            eos = translator.manifest.special_ids.eos
            ids = [[*e.ids, eos] for i in members for e in work[i][2].encodings]
            out = iter(await self.scheduler.submit(key, ids))
            for i in members:
                results[i] = [next(out) for _ in work[i][2].encodings]

        if len(groups) == 1:  # most requests: one model and options, awaited without a task of their own
            [(key, members)] = groups.items()
            await run(key, members)
        else:
            await asyncio.gather(*(run(key, members) for key, members in groups.items()))
        return results

    async def _reranked(
        self, translator: Translator, rerank: Rerank, prepared: PreparedText, nbests: list[list[Hypothesis]]
    ) -> list[list[Hypothesis]]:
        """Each piece's n-best reranked by the opposite direction's scores (on the inference thread)."""
        sources = [prepared.text[p.start : p.end] for p in prepared.pieces]
        work = ChannelWork(translator, rerank.reverse, sources, nbests)
        channel = await self.scheduler.call_together(channel_scores_together, work, (translator, rerank.reverse))
        return [reranked(h, c, rerank.weight, rerank.keep) for h, c in zip(nbests, channel, strict=True)]

    def _start_cohort(self, key: Hashable, src_ids: list[list[int]]) -> Stepper[list[Hypothesis]]:
        name, options = cast(tuple[str, SearchOptions], key)
        return self.catalog.get(name).begin(src_ids, options)

    # 3) render: one translation per text
    def _finish(self, job: _Job, hyps: list[list[Hypothesis]]) -> TextTranslation:
        translator, p = job.translator, job.prepared
        views = [view_piece(translator, enc, nbest[0], job.view) for enc, nbest in zip(p.encodings, hyps, strict=True)]
        whole_view, segments = self._combined(p, views)
        alternatives = []
        if len(views) == 1:  # n-best of a one-piece text; pieces' alternatives do not combine into texts
            others = [view_piece(translator, p.encodings[0], h, job.view) for h in hyps[0][1:]]
            alternatives = [self._rendered(translator, self._combined(p, [v])[0]) for v in others]
        name = translator.manifest.name
        return TextTranslation(
            name, self._rendered(translator, whole_view), alternatives, segments, job.view, job.warnings, job.detected
        )

    @staticmethod
    def _combined(p: PreparedText, views: list[PieceView]) -> tuple[PieceView, list[SegmentSpan]]:
        joined, spans = join(p.text, p.pieces, [v.text for v in views])
        return combine(views, p.pieces, spans, joined)

    def _rendered(self, translator: Translator, view: PieceView) -> Rendered:
        return rendered(view, unattended_threshold(self.limits, translator))

    def _check_translate_size(self, jobs: list[_Job]) -> None:
        """Bound the attention payload before decoding, from the longest answer each text could get."""
        cells = 0
        for job in jobs:
            if job.view.format == "none":
                continue
            lengths = [len(e.ids) + 1 for e in job.prepared.encodings]
            caps = job.translator.max_lengths(lengths, job.options.max_output_tokens)
            rows = int(sum(caps)) + len(caps)  # generated tokens (EOS included), and a spare row each
            columns = job.view.top_k if job.view.format == "topk" else sum(lengths)
            cells += rows * columns * (job.n_best if len(lengths) == 1 else 1)
        advice = (
            'Ask for attention.format "topk" or "none", fewer or shorter texts, a smaller n_best or max_output_tokens'
        )
        check_cells(cells, self.limits, advice, "attention.format")

    # introspection: every layer and head of one translation, decoded as /v1/translate would, or forced
    async def introspect(self, request: IntrospectRequest) -> Introspection:
        translator, _, warnings = self.resolve_for(request.text, request.model, request.source, request.target, TEXT)
        arch = translator.manifest.architecture
        layers, heads = indices(request.layers, arch.layers, "layers"), indices(request.heads, arch.heads, "heads")
        view = attention_view(translator, AttentionOptions(granularity=request.granularity))
        options = search_options(translator, TranslateRequest([request.text], beam_size=request.beam_size), self.limits)
        with_self = request.self_attention and request.granularity == "subword"
        if request.forced_target is not None:
            if request.rerank:
                why = "rerank chooses among the model's own translations; forced_target gives one"
                raise InvalidRequest(why, field="rerank")
            prepared, hyps = await self._forced(translator, request, options)
        else:
            prepared = prepare(translator, request.text, TEXT, self.limits)
            check_pieces(len(prepared.pieces), self.limits, TEXT)
            options, rerank = self._with_rerank(translator, options, request.rerank)
            [nbests] = await self._decode([(translator, options, prepared)])
            if rerank:
                nbests = await self._reranked(translator, rerank, prepared, nbests)
            hyps = [nbest[0] for nbest in nbests]
        T = sum(len(h.tokens) for h in hyps)
        S = sum(len(e.ids) + 1 for e in prepared.encodings)
        advice = "Narrow it with layers, heads or self_attention=false"
        check_cells(len(layers) * len(heads) * T * S * (3 if with_self else 1), self.limits, advice, "layers")
        pick = np.ix_(layers, heads)
        pairs = list(zip(prepared.encodings, hyps, strict=True))
        best, segments = self._combined(prepared, [view_piece(translator, e, h, view) for e, h in pairs])
        every = [view_piece(translator, e, h, view, all_heads=True) for e, h in pairs]
        cross = block_diagonal([v.attention[pick] for v in every])  # (L', N', T, S)
        encoder_self = decoder_self = None
        if with_self:
            encoder_self, decoder_self = await self._self_attention(translator, prepared, hyps, pick)
        return Introspection(
            translator.manifest.name,
            request.forced_target is not None,
            self._rendered(translator, best),
            view,
            segments,
            layers,
            heads,
            cross,
            encoder_self,
            decoder_self,
            warnings,
        )

    async def _forced(
        self, translator: Translator, request: IntrospectRequest, options: SearchOptions
    ) -> tuple[PreparedText, list[Hypothesis]]:
        """The user's translation of the whole text, scored as the search scores its own."""
        assert request.forced_target is not None
        m = translator.manifest
        prepared = whole(translator, request.text, TEXT, self.limits)
        why = "; forced decoding scores one translation of the whole text"
        target = tokenize_within(
            translator.tgt_tokenizer, request.forced_target, Subject("forced_target"), m.limits.max_target_tokens, why
        )
        src_ids, tgt_ids = [*prepared.encodings[0].ids, m.special_ids.eos], [*target.ids, m.special_ids.eos]
        out = await self.scheduler.call(force, translator, src_ids, tgt_ids)
        log_probs = out["log_probs"].tolist()
        score = translator.score(log_probs, out["cross"], options)
        return prepared, [Hypothesis(tgt_ids, log_probs, out["cross"], score, True)]

    async def _self_attention(
        self,
        translator: Translator,
        prepared: PreparedText,
        hyps: list[Hypothesis],
        pick: tuple[npt.NDArray[np.int64], ...],
    ) -> tuple[npt.NDArray[np.float64] | None, npt.NDArray[np.float64] | None]:
        """Encoder (L', N', S, S) and decoder (L', N', T, T) self-attention, block-diagonal over pieces."""
        eos = translator.manifest.special_ids.eos
        encoder, decoder = [], []
        for enc, hyp in zip(prepared.encodings, hyps, strict=True):
            out = await self.scheduler.call(force, translator, [*enc.ids, eos], hyp.tokens)
            if "encoder_self" in out:
                encoder.append(out["encoder_self"][pick].astype(np.float64))
            if "self" in out:
                decoder.append(out["self"].transpose(1, 2, 0, 3)[pick].astype(np.float64))
        return (block_diagonal(encoder) if encoder else None), (block_diagonal(decoder) if decoder else None)
