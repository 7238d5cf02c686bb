"""`attention-mt rescore`: re-measure a shipped bundle with the current engine, into its manifest.

For when the search changes (a new penalty, repeat controls, a cap) and the recorded figures would
no longer be what users get. It can also set the bundle's search defaults first. The figures are
the Tatoeba test split and the real-text (news and health) test split, greedy and beam, with
BLEU, chrF and the loop rate. Graphs and tokenizers are untouched; the manifest is rewritten
atomically.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from export.bundle_writer import ExportError, place, staging_dir, write_manifest
from export.length_ratio import SLACK, output_ratio
from export.quality import measure_quality
from models.data import (
    Pair,
    default_corpus_path,
    default_real_text_path,
    read_corpus,
    split_corpus,
    split_real_text,
)
from service.engine.bundle import Bundle, load_bundle
from service.engine.manifest import Score, SearchDefaults
from service.engine.translator import Translator


@dataclass(frozen=True)
class RescoreOptions:
    corpus: Path | None = None  # the Tatoeba TSV (default: the shared one)
    real_text: Path | None = None  # the real-text TSV (default: the shared one)
    beams: tuple[int, ...] = (1, 4)
    no_repeat_ngram: int | None = None  # None: keep the bundle's
    repetition_penalty: float | None = None
    ratio_from_data: bool = False  # cap outputs at the training data's 99th-percentile length ratio


def rescore_bundle(bundle_dir: Path, options: RescoreOptions = RescoreOptions()) -> Bundle:
    bundle = load_bundle(bundle_dir)
    m = bundle.manifest
    if {m.source_lang, m.target_lang} != {"en", "zh"}:
        raise ExportError(
            f"{bundle_dir}: rescore scores English-Chinese test splits, not {m.source_lang}-{m.target_lang}"
        )
    tatoeba = split_corpus(read_corpus(options.corpus or default_corpus_path()))
    news = split_real_text(read_corpus(options.real_text or default_real_text_path()))
    search = _search(bundle, options, tatoeba["train"])
    translator = Translator(Bundle(bundle.path, m.model_copy(update={"search": search})))
    scores = _scores(translator, tatoeba["test"], "test", options.beams)
    scores += _scores(translator, news["test"], "news-test", options.beams)
    fields = m.model_dump(exclude={"files"})
    fields["search"], fields["quality"] = search, scores
    staged = staging_dir(bundle_dir)
    try:
        for name in m.files:
            shutil.copy2(bundle_dir / name, staged / name)
        write_manifest(staged, fields)
        return place(staged, bundle_dir, force=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _search(bundle: Bundle, options: RescoreOptions, train: list[Pair]) -> SearchDefaults:
    changes: dict[str, object] = {}
    if options.no_repeat_ngram is not None:
        changes["no_repeat_ngram"] = options.no_repeat_ngram
    if options.repetition_penalty is not None:
        changes["repetition_penalty"] = options.repetition_penalty
    if options.ratio_from_data:
        changes["max_output_ratio"] = output_ratio(Translator(bundle), train)
        changes["max_output_slack"] = SLACK
    return bundle.manifest.search.model_copy(update=changes)


def _scores(translator: Translator, pairs: list[Pair], split: str, beams: tuple[int, ...]) -> list[Score]:
    m = translator.manifest
    sources, references = [p.text(m.source_lang) for p in pairs], [p.text(m.target_lang) for p in pairs]
    return measure_quality(translator, sources, references, split, beams)
