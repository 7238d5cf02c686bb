"""Name alignment accuracy: when the model writes a name, does its attention point at the name?

For every test pair where a frequent name and its usual Chinese form both occur (Tom/汤姆,
Mary/玛丽, ...), the reference translation is force-decoded and the attention row of the name's
first target token is read. The pair counts as aligned when that row's argmax falls on a source
token overlapping the name. Accuracy is measured for every view (each layer's head mean and each
single head); the best view becomes the bundle's default attention view.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from models.data import Pair
from models.names import NAMES
from service.engine.introspection import force
from service.engine.manifest import AttentionView
from service.engine.translator import Translator

MAX_CASES = 500


@dataclass(frozen=True)
class NameCase:
    src_ids: list[int]  # with EOS
    tgt_ids: list[int]  # with EOS
    row: int  # target token where the name starts
    columns: frozenset[int]  # source tokens overlapping the name


def _span_en(text: str, name: str) -> tuple[int, int] | None:
    match = re.search(rf"(?<![A-Za-z]){name}(?![A-Za-z])", text)
    return match.span() if match else None


def _span_zh(text: str, forms: tuple[str, ...]) -> tuple[int, int] | None:
    for form in forms:
        i = text.find(form)
        if i >= 0:
            return i, i + len(form)
    return None


def find_cases(translator: Translator, pairs: list[Pair]) -> list[NameCase]:
    m = translator.manifest
    cases = []
    for pair in pairs:
        for name, forms in NAMES.items():
            spans = {"en": _span_en(pair.en, name), "zh": _span_zh(pair.zh, forms)}
            src_span, tgt_span = spans[m.source_lang], spans[m.target_lang]
            if src_span is None or tgt_span is None:
                continue
            source = translator.src_tokenizer.encode(pair.text(m.source_lang))
            target = translator.tgt_tokenizer.encode(pair.text(m.target_lang))
            if len(source.ids) >= m.limits.max_source_tokens or len(target.ids) >= m.limits.max_target_tokens:
                continue
            rows = [i for i, (s, e) in enumerate(target.offsets) if s <= tgt_span[0] < e]
            columns = frozenset(j for j, (s, e) in enumerate(source.offsets) if s < src_span[1] and src_span[0] < e)
            if rows and columns:
                eos = m.special_ids.eos
                cases.append(NameCase([*source.ids, eos], [*target.ids, eos], rows[0], columns))
    return cases[:MAX_CASES]


def accuracy_by_view(translator: Translator, cases: list[NameCase]) -> dict[str, float]:
    """Share of cases aligned, per view: "layer 1 mean", "layer 1 head 3", ..."""
    hits: dict[str, int] = {}
    for case in cases:
        cross = force(translator, case.src_ids, case.tgt_ids)["cross"][case.row]  # (L, N, S)
        for layer in range(cross.shape[0]):
            views = {f"layer {layer} mean": cross[layer].mean(axis=0)}
            views |= {f"layer {layer} head {h}": cross[layer, h] for h in range(cross.shape[1])}
            for key, row in views.items():
                hits[key] = hits.get(key, 0) + (int(np.argmax(row)) in case.columns)
    return {key: round(count / len(cases), 4) for key, count in hits.items()} if cases else {}


def choose_view(accuracy: dict[str, float], cases: int) -> AttentionView:
    """The most accurate view; a head mean wins a tie with a single head, a later layer an earlier one."""
    if not accuracy:
        return AttentionView()

    def rank(key: str) -> tuple[float, bool, int]:
        parts = key.split()
        return accuracy[key], parts[2] == "mean", int(parts[1])

    best = max(accuracy, key=rank)
    parts = best.split()
    heads: Literal["mean"] | int = "mean" if parts[2] == "mean" else int(parts[3])
    return AttentionView(
        layer=int(parts[1]),
        heads=heads,
        name_alignment_accuracy=accuracy[best],
        name_alignment_cases=cases,
        accuracy_by_view=accuracy,
    )


def default_view(translator: Translator, pairs: list[Pair]) -> AttentionView:
    cases = find_cases(translator, pairs)
    return choose_view(accuracy_by_view(translator, cases), len(cases))
