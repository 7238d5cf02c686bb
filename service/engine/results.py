"""What the engine answers, as typed objects. The API turns them into JSON (service/api/presentation.py).

Legend: T target tokens, S source tokens, L layers, N heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from service.engine.attention_view import Matrix, Token
from service.engine.errors import Subject, Worded
from service.engine.requests import AttentionOptions


@dataclass(frozen=True)
class Signals:
    """Attention-derived heuristics (service/engine/signals.py says what each means)."""

    coverage: list[float]  # (S,)
    entropy: list[float]  # (T,)
    unattended_source: list[int]
    unattended_threshold: float
    eos_mass: float


@dataclass(frozen=True)
class Rendered:
    """One translation as a client sees it: text, tokens with offsets, attention at the chosen view."""

    text: str
    score: float
    finished: bool
    source_tokens: list[Token]
    target_tokens: list[Token]
    attention: Matrix  # (T, S): rows target tokens, columns source tokens
    signals: Signals


@dataclass(frozen=True)
class SegmentSpan:
    """One piece the model translated on its own: its spans in the source and the translation,
    its token ranges, and what separates it from the piece before."""

    source: tuple[int, int]
    target: tuple[int, int]
    source_tokens: tuple[int, int]
    target_tokens: tuple[int, int]
    join: str  # start | line | sentence | clause | limit


@dataclass(frozen=True)
class Notice(Worded):
    """A warning: the answer stands, but the user should know (e.g. the text looks like another language)."""

    code: str
    template: str  # with FIELD where it names its subject
    subject: Subject | None = None


@dataclass(frozen=True)
class Detection:
    language: str
    confidence: float  # 0..1


@dataclass(frozen=True)
class TextTranslation:
    model: str
    best: Rendered
    alternatives: list[Rendered]  # n-best; for a text of one piece only
    segments: list[SegmentSpan]
    view: AttentionOptions  # with the bundle's defaults filled in
    warnings: list[Notice] = field(default_factory=list)
    detected: Detection | None = None


@dataclass(frozen=True)
class Introspection:
    """Every layer and head of one translation (decoded as /v1/translate would, or forced)."""

    model: str
    forced: bool
    best: Rendered
    view: AttentionOptions
    segments: list[SegmentSpan]
    layers: list[int]
    heads: list[int]
    cross_attention: npt.NDArray[np.float64]  # (L', N', T, S)
    encoder_self_attention: npt.NDArray[np.float64] | None  # (L', N', S, S)
    decoder_self_attention: npt.NDArray[np.float64] | None  # (L', N', T, T)
    warnings: list[Notice] = field(default_factory=list)
