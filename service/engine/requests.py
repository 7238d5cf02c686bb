"""Engine-level requests: what a client asked for, after the HTTP edge parsed it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttentionOptions:
    granularity: str = "subword"  # subword | word
    format: str = "dense"  # dense | topk | none
    top_k: int = 3
    layer: int | None = None  # None: the bundle's default view
    heads: str | int | None = None  # "mean" | head index | None: the bundle's default view


@dataclass(frozen=True)
class TranslateRequest:
    texts: list[str]
    model: str | None = None
    source: str | None = None
    target: str | None = None
    beam_size: int | None = None  # None: the service's default
    n_best: int = 1
    max_output_tokens: int | None = None
    attention: AttentionOptions = field(default_factory=AttentionOptions)
    no_repeat_ngram: int | None = None  # None: the bundle's default
    repetition_penalty: float | None = None
    rerank: bool = False  # the n-best reranked by the opposite direction's model


@dataclass(frozen=True)
class IntrospectRequest:
    text: str
    forced_target: str | None = None
    beam_size: int | None = None  # None: the bundle's default, as /v1/translate
    model: str | None = None
    source: str | None = None
    target: str | None = None
    layers: list[int] | None = None  # None: every layer
    heads: list[int] | None = None  # None: every head
    self_attention: bool = True  # subword granularity only
    granularity: str = "subword"  # subword | word (cross-attention and tokens)
    rerank: bool = False  # as /v1/translate, so the translation shown is the one it gives
