"""The translation service's core: validate, tokenize, batch, decode, and shape the results.

It raises domain errors (InputTooLong, UnsupportedPair, ...) and knows nothing of HTTP.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from service.engine.attention_view import WORD_RULE, Token, merge_matrix, merge_tokens, select_heads, top_k, word_groups
from service.engine.batcher import Batcher, BatcherConfig
from service.engine.catalog import Catalog
from service.engine.errors import InputTooLong, InvalidRequest
from service.engine.introspection import force, greedy_target
from service.engine.requests import AttentionOptions, IntrospectRequest, TranslateRequest
from service.engine.search import Hypothesis
from service.engine.signals import signals
from service.engine.text import check_text
from service.engine.tokenizer import Encoding, TextTokenizer
from service.engine.translator import SearchOptions, Translator
from service.settings import Settings


class TranslationService:
    def __init__(self, catalog: Catalog, settings: Settings, on_batch: Any = None) -> None:
        self.catalog, self.settings = catalog, settings
        config = BatcherConfig(
            batching=settings.batching,
            max_batch=settings.max_batch_size,
            max_delay_s=settings.max_queue_delay_ms / 1000,
            max_queue=settings.max_queue,
            retry_after_s=settings.retry_after_s,
        )
        self.batcher: Batcher[list[Hypothesis]] = Batcher(self._run_batch, config, on_batch or (lambda n: None))

    # 0) which model
    def resolve(self, model: str | None, source: str | None, target: str | None) -> Translator:
        if model is not None:
            return self.catalog.get(model)
        if source is None or target is None:
            raise InvalidRequest("give either model, or both source and target", field="model")
        return self.catalog.for_pair(source, target)

    # 1) validate and tokenize
    def encode(
        self, translator: Translator, texts: list[str], field: str = "q", single: bool = False
    ) -> list[Encoding]:
        """Check and tokenize texts; errors name the field (`q` for a single text, else `q[i]`)."""
        s = self.settings
        if not 1 <= len(texts) <= s.max_texts:
            raise InputTooLong(
                f"{field} has {len(texts)} texts; the limit is {s.max_texts}", field=field, limit=s.max_texts
            )
        limit = translator.manifest.limits.max_source_tokens
        encodings = []
        for i, text in enumerate(texts):
            enc = self._tokenize(translator.src_tokenizer, text, field if single else f"{field}[{i}]", limit)
            encodings.append(enc)
        return encodings

    def search_options(self, translator: Translator, request: TranslateRequest) -> SearchOptions:
        """The bundle's default search, then the service's overrides, then the request's."""
        s = self.settings
        beam = request.beam_size
        if beam is None:
            beam = s.default_beam_size or translator.manifest.search.beam_size
        if not 1 <= beam <= s.max_beam_size:
            raise InvalidRequest(
                f"beam_size is {beam}; it must be 1..{s.max_beam_size}", field="beam_size", limit=s.max_beam_size
            )
        if not 1 <= request.n_best <= beam:
            raise InvalidRequest(
                f"n_best is {request.n_best}; it must be 1..beam_size ({beam})", field="n_best", limit=beam
            )
        limit = translator.manifest.limits.max_target_tokens
        out = request.max_output_tokens
        if out is not None and not 1 <= out <= limit:
            raise InvalidRequest(
                f"max_output_tokens is {out}; it must be 1..{limit}", field="max_output_tokens", limit=limit
            )
        return translator.options(beam, request.n_best, out, s.length_penalty)

    # 2) decode, batched with other requests
    async def translate(self, request: TranslateRequest) -> dict[str, Any]:
        translator = self.resolve(request.model, request.source, request.target)
        encodings = self.encode(translator, request.texts, single=request.single)
        options = self.search_options(translator, request)
        view = self.attention_view(translator, request.attention)
        self._check_translate_size(translator, encodings, options, view)
        eos = translator.manifest.special_ids.eos
        key = (translator.manifest.name, options)
        results = await self.batcher.submit(key, [[*e.ids, eos] for e in encodings])
        translations = [self.shape(translator, enc, hyps, view) for enc, hyps in zip(encodings, results, strict=True)]
        return {"model": translator.manifest.name, "translations": translations}

    def _run_batch(self, key: Hashable, src_ids: list[list[int]]) -> list[list[Hypothesis]]:
        name, options = cast(tuple[str, SearchOptions], key)
        return self.catalog.get(name).search_ids(src_ids, options)

    # introspection: every layer and head of one translation, forced or decoded
    async def introspect(self, request: IntrospectRequest) -> dict[str, Any]:
        translator = self.resolve(request.model, request.source, request.target)
        [source] = self.encode(translator, [request.text], field="text", single=True)
        eos = translator.manifest.special_ids.eos
        forced = None if request.forced_target is None else self.encode_target(translator, request.forced_target)
        arch = translator.manifest.architecture
        layers = self._indices(request.layers, arch.layers, "layers")
        heads = self._indices(request.heads, arch.heads, "heads")
        src_ids = [*source.ids, eos]
        tgt_ids = forced if forced is not None else await self.batcher.run_in_worker(greedy_target, translator, src_ids)
        with_self = request.self_attention and request.granularity == "subword"
        self._check_size(
            len(layers) * len(heads) * len(tgt_ids) * len(src_ids) * (3 if with_self else 1),
            "Narrow it with layers, heads or self_attention=false",
            "layers",
        )
        out = await self.batcher.run_in_worker(force, translator, src_ids, tgt_ids)
        hyp = Hypothesis(tgt_ids, out["log_probs"].tolist(), out["cross"], float(out["log_probs"].sum()), True)
        view = self.attention_view(translator, AttentionOptions(granularity=request.granularity))
        shaped = self.shape_hypothesis(translator, source, hyp, view)
        pick = np.ix_(layers, heads)
        cross = out["cross"].transpose(1, 2, 0, 3)[pick]  # (L', N', T, S)
        if request.granularity == "word":
            src_groups, tgt_groups = self.word_groups(translator, source, hyp)
            cross = np.array([[merge_matrix(m, src_groups, tgt_groups) for m in per_layer] for per_layer in cross])
        result = {
            "model": translator.manifest.name,
            "forced": forced is not None,
            **{k: shaped[k] for k in ("text", "score", "source_tokens", "target_tokens", "attention_view", "signals")},
            "layers": layers,
            "heads": heads,
            "cross_attention": _nested(cross),
            "encoder_self_attention": None,
            "decoder_self_attention": None,
        }
        if with_self and "encoder_self" in out:
            result["encoder_self_attention"] = _nested(out["encoder_self"][pick])  # (L', N', S, S)
        if with_self and "self" in out:
            result["decoder_self_attention"] = _nested(out["self"].transpose(1, 2, 0, 3)[pick])  # (L', N', T, T)
        return result

    def _check_translate_size(
        self, translator: Translator, encodings: list[Encoding], options: SearchOptions, view: AttentionOptions
    ) -> None:
        """Bound the attention payload before decoding, from the longest answer each text could get."""
        if view.format == "none":
            return
        caps = translator.max_lengths([len(enc.ids) + 1 for enc in encodings], options.max_output_tokens)
        cells = 0
        for enc, rows in zip(encodings, caps, strict=True):  # rows: generated tokens (EOS included), + 1 spare
            cells += (int(rows) + 1) * (view.top_k if view.format == "topk" else len(enc.ids) + 1) * options.n_best
        advice = 'Ask for attention.format "topk" or "none", fewer texts, a smaller n_best or max_output_tokens'
        self._check_size(cells, advice, "attention.format")

    def _check_size(self, cells: int, advice: str, field: str) -> None:
        """Refuse an answer too large to send, saying how to narrow it (bounded payloads)."""
        limit = self.settings.max_attention_cells
        if cells > limit:
            message = f"this answer could hold {cells} attention weights; the limit is {limit}. {advice}"
            raise InvalidRequest(message, field=field, limit=limit)

    @staticmethod
    def word_groups(
        translator: Translator, source: Encoding, hyp: Hypothesis
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Word groups of the source and target tokens (introspection merges every layer and head)."""
        src_tokens, src_pieces = source_tokens(source)
        tgt_tokens, tgt_pieces, _ = target_tokens(translator, hyp)
        return (
            word_groups(src_tokens, src_pieces),
            word_groups(tgt_tokens, tgt_pieces),
        )

    def encode_target(self, translator: Translator, text: str) -> list[int]:
        limit = translator.manifest.limits.max_target_tokens
        ids = self._tokenize(translator.tgt_tokenizer, text, "forced_target", limit).ids
        return [*ids, translator.manifest.special_ids.eos]

    def _tokenize(self, tokenizer: TextTokenizer, text: str, name: str, token_limit: int) -> Encoding:
        """Check one text (characters, then tokens with the end-of-sentence token) and tokenize it."""
        check_text(text, name)
        chars = self.settings.max_chars
        if len(text) > chars:
            raise InputTooLong(f"{name} has {len(text)} characters; the limit is {chars}", field=name, limit=chars)
        enc = tokenizer.encode(text)
        if len(enc.ids) + 1 > token_limit:
            message = f"{name} has {len(enc.ids) + 1} tokens; the limit is {token_limit}"
            raise InputTooLong(message, field=name, limit=token_limit)
        return enc

    @staticmethod
    def _indices(requested: list[int] | None, count: int, field: str) -> list[int]:
        if requested is None:
            return list(range(count))
        if not requested or any(not 0 <= i < count for i in requested):
            raise InvalidRequest(f"{field} must list indices in 0..{count - 1}, got {requested}", field=field)
        return list(dict.fromkeys(requested))

    # 3) shape the answer
    def attention_view(self, translator: Translator, options: AttentionOptions) -> AttentionOptions:
        """Fill the bundle's default view and check the layer and head exist."""
        arch, default = translator.manifest.architecture, translator.manifest.attention_view
        layer = default.layer if options.layer is None else options.layer
        heads = default.heads if options.heads is None else options.heads
        if not -arch.layers <= layer < arch.layers:
            raise InvalidRequest(
                f"attention.layer is {layer}; this model has {arch.layers} layer(s)", field="attention.layer"
            )
        if heads != "mean" and not (isinstance(heads, int) and 0 <= heads < arch.heads):
            raise InvalidRequest(
                f'attention.heads is {heads!r}; use "mean" or 0..{arch.heads - 1}', field="attention.heads"
            )
        if not options.top_k >= 1:
            raise InvalidRequest("attention.top_k must be at least 1", field="attention.top_k")
        return AttentionOptions(options.granularity, options.format, options.top_k, layer, heads)

    def shape(
        self, translator: Translator, source: Encoding, hyps: list[Hypothesis], view: AttentionOptions
    ) -> dict[str, Any]:
        best, *alternatives = [self.shape_hypothesis(translator, source, h, view) for h in hyps]
        best["alternatives"] = alternatives
        return best

    def shape_hypothesis(
        self, translator: Translator, source: Encoding, hyp: Hypothesis, view: AttentionOptions
    ) -> dict[str, Any]:
        src_tokens, src_pieces = source_tokens(source)
        tgt_tokens, tgt_pieces, text = target_tokens(translator, hyp)
        assert view.layer is not None and view.heads is not None
        matrix = select_heads(hyp.attention[:, :, :, : len(src_tokens)], view.layer, view.heads)  # (T, S)
        if view.granularity == "word":
            src_groups = word_groups(src_tokens, src_pieces)
            tgt_groups = word_groups(tgt_tokens, tgt_pieces)
            matrix = merge_matrix(matrix, src_groups, tgt_groups)
            src_tokens = merge_tokens(src_tokens, src_groups, source.text)
            tgt_tokens = merge_tokens(tgt_tokens, tgt_groups, text)
        attention: Any = None
        if view.format == "dense":
            attention = [[round(float(x), 6) for x in row] for row in matrix]
        elif view.format == "topk":
            attention = top_k(matrix, view.top_k)
        return {
            "text": text,
            "score": round(float(hyp.score), 6),
            "finished": hyp.finished,
            "source_tokens": [token_dict(t) for t in src_tokens],
            "target_tokens": [token_dict(t) for t in tgt_tokens],
            "attention": attention,
            "attention_view": {
                "layer": view.layer,
                "heads": view.heads,
                "granularity": view.granularity,
                "format": view.format,
                "rule": WORD_RULE if view.granularity == "word" else "subword pieces as the model sees them",
            },
            "signals": signals(matrix, src_tokens, self.settings.unattended_threshold),
        }


def _nested(array: npt.NDArray[Any]) -> list[Any]:
    return np.round(array.astype(np.float64), 6).tolist()  # type: ignore[no-any-return]


def token_dict(token: Token) -> dict[str, Any]:
    out: dict[str, Any] = {"text": token.text, "start": token.start, "end": token.end}
    if token.logprob is not None:
        out["logprob"] = round(token.logprob, 6)
    if token.special:
        out["special"] = True
    return out


def source_tokens(source: Encoding) -> tuple[list[Token], list[str]]:
    """The pieces the encoder read (a target-language token flagged special, with an empty span),
    and its end-of-sentence token (flagged special)."""
    end = len(source.text)
    tokens = [
        Token(p if source.is_special(i) or e <= s else source.text[s:e], s, e, special=source.is_special(i))
        for i, (p, (s, e)) in enumerate(zip(source.pieces, source.offsets, strict=True))
    ]
    return [*tokens, Token("</s>", end, end, special=True)], [*source.pieces, "</s>"]


def target_tokens(translator: Translator, hyp: Hypothesis) -> tuple[list[Token], list[str], str]:
    """Generated pieces with their offsets in the output text and log-probs; EOS (and any other
    token that leaves no text, e.g. <unk> in a converted model) flagged special."""
    eos = translator.manifest.special_ids.eos
    body = hyp.tokens[:-1] if hyp.finished else hyp.tokens
    decoded = translator.tgt_tokenizer.decode(body)
    text = decoded.text
    tokens = []
    for i, (p, (s, e), lp) in enumerate(
        zip(decoded.pieces, decoded.offsets, hyp.token_log_probs[: len(body)], strict=True)
    ):
        surface = p if decoded.is_special(i) else text[s:e] if e > s else p.replace("\u2581", " ")
        tokens.append(Token(surface, s, e, special=decoded.is_special(i), logprob=float(lp)))
    pieces = list(decoded.pieces)
    if hyp.finished:
        assert hyp.tokens[-1] == eos
        tokens.append(Token("</s>", len(text), len(text), special=True, logprob=float(hyp.token_log_probs[-1])))
        pieces.append("</s>")
    return tokens, pieces, text
