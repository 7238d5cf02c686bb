"""Request and response bodies. Requests are strict: unknown fields are rejected and no string
is coerced into a number or a boolean."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class AttentionParams(Strict):
    # frozen: the default below is shared by every request instead of deep-copied for each (5.1 -> 1.1 us a body)
    model_config = ConfigDict(**Strict.model_config, frozen=True)

    granularity: Literal["subword", "word"] = "subword"
    format: Literal["dense", "topk", "none"] = "dense"
    top_k: int = Field(3, ge=1, le=64)
    layer: int | None = Field(None, description="decoder layer (negative counts from the end); default: the model's")
    heads: Literal["mean"] | int | None = Field(None, description='"mean" or a head index; default: the model\'s')


class TranslateBody(Strict):
    model_config = ConfigDict(
        **Strict.model_config,
        json_schema_extra={
            "examples": [
                {"q": "Tom chases Jerry.", "source": "en", "target": "zh"},
                {
                    "q": ["Tom chases Jerry.", "I am full."],
                    "source": "en",
                    "target": "zh",
                    "beam_size": 4,
                    "n_best": 2,
                    "attention": {"granularity": "word", "format": "topk", "top_k": 3},
                },
            ]
        },
    )
    q: str | list[str] = Field(description="one text, or a list of texts (1..max_texts)")
    source: str | None = Field(
        None, description='source language code as /v1/models lists them, or "auto" to detect it; or give model'
    )
    target: str | None = Field(None, description="target language")
    model: str | None = Field(None, description="a bundle name from /v1/models, instead of source/target")
    beam_size: int | None = Field(
        None, description="1 = greedy; default: the model's own search (/v1/models), maximum: a setting"
    )
    n_best: int = Field(1, description="hypotheses per text, at most beam_size")
    max_output_tokens: int | None = Field(
        None, description="cap on generated tokens per sentence, at most the model's limit"
    )
    no_repeat_ngram: int | None = Field(
        None,
        description="no n-gram of this size twice in a sentence's translation (0: off, up to 8); default: the model's",
    )
    repetition_penalty: float | None = Field(
        None, description="penalty on tokens already written (1.0: off, up to 3.0); default: the model's"
    )
    rerank: bool = Field(
        False,
        description="rerank an 8-best list by the loaded model of the opposite direction (how well each candidate "
        "explains the source): +1.3 BLEU zh-en and +1.9 en-zh on Tatoeba test, at about 3.5x the time",
    )
    attention: AttentionParams = AttentionParams()
    timeout_ms: int | None = Field(None, ge=1, description="deadline in ms, capped by the service's own")


class IntrospectBody(Strict):
    model_config = ConfigDict(
        **Strict.model_config,
        json_schema_extra={
            "examples": [
                {"q": "Tom chases Jerry.", "source": "en", "target": "zh"},
                {
                    "q": "Tom chases Jerry.",
                    "forced_target": "汤姆追杰瑞。",
                    "model": "en-zh",
                    "layers": [0],
                    "heads": [0, 1],
                },
            ]
        },
    )
    q: str = Field(
        validation_alias=AliasChoices("q", "text"),
        description="the text, as /v1/translate's q (one text); `text` is accepted as an older alias",
    )
    forced_target: str | None = Field(None, description="a translation to score instead of decoding one")
    beam_size: int | None = Field(None, description="as /v1/translate: the model's own by default")
    source: str | None = None
    target: str | None = None
    model: str | None = None
    layers: list[int] | None = Field(None, description="decoder layers to return (default: all)")
    heads: list[int] | None = Field(None, description="heads to return (default: all)")
    self_attention: bool = Field(
        True, description="also return encoder and decoder self-attention (Transformer, subword)"
    )
    granularity: Literal["subword", "word"] = Field(
        "subword", description="word: merge cross-attention as /v1/translate"
    )
    rerank: bool = Field(False, description="as /v1/translate: show the translation a reranked request gets")
    timeout_ms: int | None = Field(None, ge=1, description="deadline in ms, capped by the service's own")


class SvgBody(IntrospectBody):
    """The /v1/attention request, plus which layer and head to draw."""

    layer: int | None = Field(
        None, description="decoder layer to draw (negative counts from the end); default: the model's default view"
    )
    head: Literal["mean"] | int | None = Field(
        None, description='"mean" of the heads, or one head index; default: the model\'s default view'
    )


class TokenOut(BaseModel):
    text: str
    start: int
    end: int
    logprob: float | None = None
    special: bool | None = None


class Signals(BaseModel):
    coverage: list[float]
    entropy: list[float]
    unattended_source: list[int]
    unattended_threshold: float
    eos_mass: float
    heuristic: bool


class AttentionViewOut(BaseModel):
    layer: int
    heads: Literal["mean"] | int
    granularity: str
    format: str
    rule: str


class TopKEntry(BaseModel):
    index: int
    weight: float


class HypothesisOut(BaseModel):
    text: str
    score: float
    finished: bool
    source_tokens: list[TokenOut]
    target_tokens: list[TokenOut]
    attention: list[list[float]] | list[list[TopKEntry]] | None = Field(
        description="rows = target tokens, columns = source tokens; each dense row sums to 1"
    )
    attention_view: AttentionViewOut
    signals: Signals


class SpanOut(BaseModel):
    start: int
    end: int


class SegmentOut(BaseModel):
    source: SpanOut = Field(description="characters of the source text this piece covers")
    target: SpanOut = Field(description="characters of the translation it became")
    source_tokens: SpanOut = Field(description="its range of source_tokens (end exclusive)")
    target_tokens: SpanOut = Field(description="its range of target_tokens (end exclusive)")
    join: Literal["start", "line", "sentence", "clause", "limit"] = Field(
        description="what separates it from the piece before: a line break, a sentence end, a clause "
        "(an over-long sentence cut at ,;:), or the token limit (a last resort)"
    )


class WarningOut(BaseModel):
    code: str
    message: str


class DetectedOut(BaseModel):
    language: str
    confidence: float


class TranslationOut(HypothesisOut):
    alternatives: list[HypothesisOut] = Field(description="n-best; for a text the model read as one piece")
    segments: list[SegmentOut] = Field(description="the sentences and clauses translated one by one")
    warnings: list[WarningOut]
    model: str
    detected_language: DetectedOut | None = None


class TranslateResponse(BaseModel):
    model: str
    translations: list[TranslationOut]


class IntrospectResponse(BaseModel):
    model: str
    forced: bool
    text: str
    score: float
    source_tokens: list[TokenOut]
    target_tokens: list[TokenOut]
    attention_view: AttentionViewOut
    signals: Signals
    segments: list[SegmentOut]
    warnings: list[WarningOut]
    layers: list[int]
    heads: list[int]
    cross_attention: list[list[list[list[float]]]] = Field(description="[layer][head][target][source]")
    encoder_self_attention: list[list[list[list[float]]]] | None = Field(description="[layer][head][source][source]")
    decoder_self_attention: list[list[list[list[float]]]] | None = Field(description="[layer][head][target][target]")


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    limit: int | None = None
    request_id: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail
