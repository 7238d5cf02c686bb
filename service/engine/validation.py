"""Requests checked against the service's limits and the model's, before any decoding.

Every refusal is a domain error naming the field and the limit; the API maps it to a status.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.errors import FIELD, TEXTS, InputTooLong, InvalidRequest, Subject
from service.engine.requests import AttentionOptions, TranslateRequest
from service.engine.segmentation import Piece
from service.engine.text import check_text, normalize
from service.engine.tokenizer import Encoding, TextTokenizer
from service.engine.translator import SearchOptions, Translator

MAX_NO_REPEAT_NGRAM = 8
MAX_REPETITION_PENALTY = 3.0
DEFAULT_UNATTENDED = 0.2  # coverage under which a word is flagged, for bundles that never measured theirs


@dataclass(frozen=True)
class Limits:
    """The service's own limits and defaults (the HTTP settings fill them in)."""

    max_texts: int = 32
    max_chars: int = 4000
    max_beam_size: int = 8
    default_beam_size: int | None = None  # None: each bundle's own
    length_penalty: float | None = None  # None: each bundle's own
    max_attention_cells: int = 1_000_000
    max_pieces: int = 256  # sentences and clauses of one request: what the queue can hold
    unattended_threshold: float | None = None  # None: each bundle's measured one, else DEFAULT_UNATTENDED


@dataclass(frozen=True)
class PreparedText:
    """A text ready to decode: normalised, cut into pieces, each piece tokenized (offsets within it)."""

    subject: Subject
    text: str
    pieces: list[Piece]
    encodings: list[Encoding]


def check_count(count: int, limits: Limits, subject: Subject = TEXTS) -> None:
    if not 1 <= count <= limits.max_texts:
        message = f"{FIELD} has {count} texts; the limit is {limits.max_texts}"
        raise InputTooLong(message, field=subject, limit=limits.max_texts)


def checked_text(text: str, subject: Subject, limits: Limits) -> str:
    """The text, normalised, if it can be translated at all (characters, length)."""
    check_text(text, subject)
    if len(text) > limits.max_chars:
        message = f"{FIELD} has {len(text)} characters; the limit is {limits.max_chars}"
        raise InputTooLong(message, field=subject, limit=limits.max_chars)
    return normalize(text)


def prepare(translator: Translator, text: str, subject: Subject, limits: Limits) -> PreparedText:
    """Check a text and cut it into the pieces the model translates one by one."""
    text = checked_text(text, subject, limits)
    encoded = translator.segment_encoded(text)
    return PreparedText(subject, text, [p for p, _ in encoded], [e for _, e in encoded])


def whole(translator: Translator, text: str, subject: Subject, limits: Limits) -> PreparedText:
    """A text as one piece (forced decoding scores one translation of the whole text): within the token limit."""
    text = checked_text(text, subject, limits)
    enc = tokenize_within(translator.src_tokenizer, text, subject, translator.manifest.limits.max_source_tokens)
    return PreparedText(subject, text, [Piece(0, len(text), "start")], [enc])


def tokenize_within(tokenizer: TextTokenizer, text: str, subject: Subject, token_limit: int, why: str = "") -> Encoding:
    enc = tokenizer.encode(text)
    if len(enc.ids) + 1 > token_limit:
        message = f"{FIELD} has {len(enc.ids) + 1} tokens; the limit is {token_limit}{why}"
        raise InputTooLong(message, field=subject, limit=token_limit)
    return enc


def search_options(translator: Translator, request: TranslateRequest, limits: Limits) -> SearchOptions:
    """The bundle's default search, then the service's overrides, then the request's."""
    beam = request.beam_size
    if beam is None:
        beam = limits.default_beam_size or translator.manifest.search.beam_size
    if not 1 <= beam <= limits.max_beam_size:
        raise InvalidRequest(
            f"beam_size is {beam}; it must be 1..{limits.max_beam_size}", field="beam_size", limit=limits.max_beam_size
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
    if request.no_repeat_ngram is not None and not 0 <= request.no_repeat_ngram <= MAX_NO_REPEAT_NGRAM:
        message = f"no_repeat_ngram is {request.no_repeat_ngram}; it must be 0 (off)..{MAX_NO_REPEAT_NGRAM}"
        raise InvalidRequest(message, field="no_repeat_ngram", limit=MAX_NO_REPEAT_NGRAM)
    penalty = request.repetition_penalty
    if penalty is not None and not 1.0 <= penalty <= MAX_REPETITION_PENALTY:
        message = f"repetition_penalty is {penalty}; it must be 1.0 (off)..{MAX_REPETITION_PENALTY}"
        raise InvalidRequest(message, field="repetition_penalty")
    return translator.options(beam, request.n_best, out, limits.length_penalty, request.no_repeat_ngram, penalty)


def unattended_threshold(limits: Limits, translator: Translator) -> float:
    """The service's setting if given, else the threshold measured for the bundle, else the default."""
    if limits.unattended_threshold is not None:
        return limits.unattended_threshold
    measured = translator.manifest.attention_view.omission
    return measured.threshold if measured is not None else DEFAULT_UNATTENDED


def attention_view(translator: Translator, options: AttentionOptions) -> AttentionOptions:
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


def indices(requested: list[int] | None, count: int, field: str) -> list[int]:
    if requested is None:
        return list(range(count))
    if not requested or any(not 0 <= i < count for i in requested):
        raise InvalidRequest(f"{field} must list indices in 0..{count - 1}, got {requested}", field=field)
    return list(dict.fromkeys(requested))


def check_cells(cells: int, limits: Limits, advice: str, field: str) -> None:
    """Refuse an answer too large to send, saying how to narrow it (bounded payloads)."""
    if cells > limits.max_attention_cells:
        message = (
            f"this answer could hold {cells} attention weights; the limit is {limits.max_attention_cells}. {advice}"
        )
        raise InvalidRequest(message, field=field, limit=limits.max_attention_cells)


def check_pieces(count: int, limits: Limits, subject: Subject = TEXTS) -> None:
    """A request can never be larger than the queue that would hold its pieces."""
    if count > limits.max_pieces:
        message = (
            f"{FIELD} holds {count} sentences and clauses to translate; at most {limits.max_pieces} fit at once "
            "(MT_MAX_QUEUE). Send fewer or shorter texts"
        )
        raise InputTooLong(message, field=subject, limit=limits.max_pieces)
