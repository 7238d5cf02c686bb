"""Typed engine results -> JSON bodies. The one place that decides the shape of an answer.

Attention matrices are returned as float32 numpy arrays; service/api/responses.py writes them."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from service.engine.attention_view import WORD_RULE, Token, top_k
from service.engine.errors import Subject
from service.engine.requests import AttentionOptions
from service.engine.results import Introspection, Notice, Rendered, SegmentSpan, Signals, TextTranslation

DIGITS = 6
API_NAMES = {"texts": "q", "text": "q"}  # the engine request's fields that the API calls otherwise


def nested(array: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """Weights rounded to DIGITS, kept as a float32 array: the response writes it directly."""
    return np.ascontiguousarray(np.round(np.asarray(array, dtype=np.float32), DIGITS))


def token_json(token: Token) -> dict[str, Any]:
    out: dict[str, Any] = {"text": token.text, "start": token.start, "end": token.end}
    if token.logprob is not None:
        out["logprob"] = round(token.logprob, DIGITS)
    if token.special:
        out["special"] = True
    return out


def signals_json(s: Signals) -> dict[str, Any]:
    return {
        "coverage": [round(c, DIGITS) for c in s.coverage],
        "entropy": [round(e, DIGITS) for e in s.entropy],
        "unattended_source": s.unattended_source,
        "unattended_threshold": s.unattended_threshold,
        "eos_mass": round(s.eos_mass, DIGITS),
        "heuristic": True,
    }


def view_json(view: AttentionOptions) -> dict[str, Any]:
    rule = WORD_RULE if view.granularity == "word" else "subword pieces as the model sees them"
    return {
        "layer": view.layer,
        "heads": view.heads,
        "granularity": view.granularity,
        "format": view.format,
        "rule": rule,
    }


def attention_json(matrix: npt.NDArray[np.float64], view: AttentionOptions) -> Any:
    if view.format == "dense":
        return nested(matrix)
    if view.format == "topk":
        return top_k(matrix, view.top_k)
    return None


def rendered_json(r: Rendered, view: AttentionOptions) -> dict[str, Any]:
    return {
        "text": r.text,
        "score": round(r.score, DIGITS),
        "finished": r.finished,
        "source_tokens": [token_json(t) for t in r.source_tokens],
        "target_tokens": [token_json(t) for t in r.target_tokens],
        "attention": attention_json(r.attention, view),
        "attention_view": view_json(view),
        "signals": signals_json(r.signals),
    }


def segment_json(s: SegmentSpan) -> dict[str, Any]:
    def span(pair: tuple[int, int]) -> dict[str, int]:
        return {"start": pair[0], "end": pair[1]}

    return {
        "source": span(s.source),
        "target": span(s.target),
        "source_tokens": span(s.source_tokens),
        "target_tokens": span(s.target_tokens),
        "join": s.join,
    }


def json_path(subject: Subject | None, one_text: bool) -> str | None:
    """The body's name for what an engine error is about: `q[3]`, or `q` when `q` was one string."""
    if subject is None:
        return None
    name = API_NAMES.get(subject.field, subject.field)
    return name if subject.index is None or one_text else f"{name}[{subject.index}]"


def notice_json(n: Notice, text_name: str) -> dict[str, str]:
    """A warning about one text, which the answer calls `text_name` (`q[2]`, or a CLI's `line 7`)."""
    return {"code": n.code, "message": n.worded(text_name)}


def translation_json(t: TextTranslation, text_name: str = "q") -> dict[str, Any]:
    out = rendered_json(t.best, t.view)
    out["alternatives"] = [rendered_json(a, t.view) for a in t.alternatives]
    out["segments"] = [segment_json(s) for s in t.segments]
    out["warnings"] = [notice_json(n, text_name) for n in t.warnings]
    out["model"] = t.model
    if t.detected is not None:
        out["detected_language"] = {"language": t.detected.language, "confidence": t.detected.confidence}
    return out


def translate_json(results: list[TextTranslation], one_text: bool) -> dict[str, Any]:
    """`one_text`: the body's `q` was one string, so its warnings name `q`, not `q[0]`."""
    names = ["q"] if one_text else [f"q[{i}]" for i in range(len(results))]
    translations = [translation_json(t, n) for t, n in zip(results, names, strict=True)]
    return {"model": results[0].model, "translations": translations}


def introspection_json(i: Introspection) -> dict[str, Any]:
    best = rendered_json(i.best, i.view)
    return {
        "model": i.model,
        "forced": i.forced,
        **{k: best[k] for k in ("text", "score", "source_tokens", "target_tokens", "attention_view", "signals")},
        "segments": [segment_json(s) for s in i.segments],
        "warnings": [notice_json(n, "q") for n in i.warnings],
        "layers": i.layers,
        "heads": i.heads,
        "cross_attention": nested(i.cross_attention),
        "encoder_self_attention": None if i.encoder_self_attention is None else nested(i.encoder_self_attention),
        "decoder_self_attention": None if i.decoder_self_attention is None else nested(i.decoder_self_attention),
    }


def translation_cells(results: list[TextTranslation]) -> int:
    """Attention weights a /v1/translate answer carries (what its cost grows with)."""
    return sum(r.attention.size for t in results for r in (t.best, *t.alternatives) if t.view.format == "dense")


def introspection_cells(i: Introspection) -> int:
    arrays = (i.cross_attention, i.encoder_self_attention, i.decoder_self_attention)
    return sum(a.size for a in arrays if a is not None)
