"""Name alignment accuracy: when the model writes a name, does its attention point at the name?

For every pair where a name occurs on both sides, the reference translation is force-decoded and
the attention row of the name's first target token is read. The pair counts as aligned when that
row's argmax falls on a source token overlapping the name. Accuracy is measured for every view
(each layer's head mean and each single head); the best view becomes the bundle's default view.

Names are found two ways. English-Chinese: a frequent name and its usual Chinese form (Tom/汤姆,
Mary/玛丽, ...). Any other pair: a word copied verbatim, once on each side, that starts with a
capital or a digit (names, numbers, acronyms: "Tom" in "Tom jagt Jerry."), which needs no
word aligner and holds for any two languages that share a script.
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


Span = tuple[int, int]
COPIED_WORD = re.compile(r"(?<!\w)[A-Z0-9]\w+")


def _chinese(lang: str) -> bool:
    return lang.split("_", maxsplit=1)[0].split("-", maxsplit=1)[0] in ("zh", "zho", "cmn", "yue")


def _name_spans(source: str, target: str, source_lang: str, target_lang: str) -> list[tuple[Span, Span]]:
    """(source span, target span) of each name found on both sides."""
    if source_lang == "en" and _chinese(target_lang):
        return _names(source, target)
    if _chinese(source_lang) and target_lang == "en":
        return [(zh, en) for en, zh in _names(target, source)]
    return _copied_words(source, target)


def _names(en: str, zh: str) -> list[tuple[Span, Span]]:
    found = []
    for name, forms in NAMES.items():
        en_span, zh_span = _span_en(en, name), _span_zh(zh, forms)
        if en_span is not None and zh_span is not None:
            found.append((en_span, zh_span))
    return found


def _copied_words(source: str, target: str) -> list[tuple[Span, Span]]:
    src = {m.group(): m.span() for m in COPIED_WORD.finditer(source)}
    tgt = {m.group(): m.span() for m in COPIED_WORD.finditer(target)}
    once = {w for w in src if len(re.findall(rf"(?<!\w){re.escape(w)}(?!\w)", source)) == 1}
    once &= {w for w in tgt if len(re.findall(rf"(?<!\w){re.escape(w)}(?!\w)", target)) == 1}
    return [(src[w], tgt[w]) for w in sorted(once, key=lambda w: src[w])]


def find_cases(translator: Translator, pairs: list[tuple[str, str]]) -> list[NameCase]:
    """Name cases in (source, target) pairs that fit the model's limits, at most MAX_CASES."""
    m = translator.manifest
    eos = m.special_ids.eos
    cases = []
    for source_text, target_text in pairs:
        for src_span, tgt_span in _name_spans(source_text, target_text, m.source_lang, m.target_lang):
            source = translator.src_tokenizer.encode(source_text)
            target = translator.tgt_tokenizer.encode(target_text)
            if len(source.ids) >= m.limits.max_source_tokens or len(target.ids) >= m.limits.max_target_tokens:
                continue
            rows = [i for i, (s, e) in enumerate(target.offsets) if s <= tgt_span[0] < e]
            columns = frozenset(j for j, (s, e) in enumerate(source.offsets) if s < src_span[1] and src_span[0] < e)
            if rows and columns:
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


def choose_view(accuracy: dict[str, float], cases: int, chosen_by: str = "name alignment") -> AttentionView:
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
        chosen_by=f"{chosen_by}: the most accurate of {len(accuracy)} views on {cases} names",
    )


def default_view(translator: Translator, pairs: list[Pair]) -> AttentionView:
    """This project's own models: the view that finds names best on the test split."""
    m = translator.manifest
    cases = find_cases(translator, [(p.text(m.source_lang), p.text(m.target_lang)) for p in pairs])
    return choose_view(accuracy_by_view(translator, cases), len(cases), "name alignment on the test split")


def sample_view(translator: Translator, pairs: list[tuple[str, str]], min_cases: int = 5) -> AttentionView:
    """A converted model: the view that finds names best in the user's sample, when it has enough
    names; otherwise the penultimate decoder layer's head mean."""
    cases = find_cases(translator, pairs)
    if len(cases) >= min_cases:
        return choose_view(accuracy_by_view(translator, cases), len(cases), "name alignment on --align-sample")
    layers = translator.manifest.architecture.layers
    reason = f"--align-sample has {len(cases)} names, under {min_cases}" if pairs else "no --align-sample"
    return AttentionView(
        layer=max(layers - 2, 0),
        heads="mean",
        name_alignment_cases=len(cases),
        chosen_by=f"default: the penultimate decoder layer's head mean ({reason})",
    )
