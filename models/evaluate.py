"""`attention-mt evaluate`: BLEU, chrF and loop rate of a run or a bundle, on Tatoeba and real text.

A run directory is decoded with its PyTorch checkpoint; a bundle directory through the service's
own engine and the bundle's search defaults, which is what users get. Both cut texts into
sentences as the service does. Sets: `tatoeba` (the split of ../shared/data/tatoeba-cmn-eng) and
`news` (the held-out split of the real-text pairs, ../shared/data/news-zh-en), or a TSV of pairs.
Each pair is scored against its own reference (single reference), with sacreBLEU's `zh`
tokenizer for Chinese targets and `13a` for English.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from models.checkpoint import load_checkpoint
from models.data import (
    Pair,
    default_corpus_path,
    default_real_text_path,
    file_sha256,
    read_corpus,
    split_corpus,
    split_real_text,
)
from models.decoding import translate_texts
from models.metrics import bleu_tokenize, loop_rate, score
from service.engine.bundle import load_bundle
from service.engine.manifest import MANIFEST_FILE
from service.engine.translator import Translator

SETS = ("tatoeba", "news")
Translate = Callable[[list[str]], list[str]]


def _pairs(set_name: str, split: str, corpus: Path | None, trained_on: Path | None) -> tuple[list[Pair], Path]:
    if corpus is not None:
        return read_corpus(corpus), corpus
    if set_name == "news":
        path = default_real_text_path()
        return split_real_text(read_corpus(path))[split], path
    path = trained_on or default_corpus_path()
    return split_corpus(read_corpus(path))[split], path


def _translator_of(
    path: Path, checkpoint: str, beam: int, no_repeat_ngram: int | None
) -> tuple[Translate, str, str, dict[str, Any]]:
    """A function from source texts to translations, the direction, and what was decoded."""
    if (path / MANIFEST_FILE).is_file():
        translator = Translator(load_bundle(path))
        options = translator.options(beam_size=beam, no_repeat_ngram=no_repeat_ngram)
        m = translator.manifest
        about = {"bundle": m.name, "no_repeat_ngram": options.no_repeat_ngram, "search": m.search.model_dump()}
        return (lambda texts: translator.translate_texts(texts, options)), m.source_lang, m.target_lang, about
    torch.set_num_threads(os.cpu_count() or 1)
    ckpt = load_checkpoint(path / checkpoint)
    data = ckpt.config.data
    nr = 3 if no_repeat_ngram is None else no_repeat_ngram  # the shipped bundles' setting

    def run(texts: list[str]) -> list[str]:
        return translate_texts(
            ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer, texts, data.max_src_tokens, data.max_tgt_tokens,
            beam, source_lang=data.source, no_repeat_ngram=nr,
        )  # fmt: skip

    trained_on = ckpt.progress.get("corpus") or data.corpus
    about = {"checkpoint": checkpoint, "epoch": ckpt.progress.get("best_epoch"), "no_repeat_ngram": nr}
    about["trained_on"] = trained_on
    return run, data.source, data.target, about


def evaluate(
    path: Path,
    split: str = "test",
    corpus: Path | None = None,
    beam: int = 4,
    checkpoint: str = "best.pt",
    limit: int = 0,
    sets: tuple[str, ...] = SETS,
    no_repeat_ngram: int | None = None,
) -> dict[str, Any]:
    """Score each set; write `eval-<split>-beam<N>.json` into a run directory (not into a bundle)."""
    run, source, target, about = _translator_of(path, checkpoint, beam, no_repeat_ngram)
    trained_on = Path(about["trained_on"]) if about.get("trained_on") else None
    results: dict[str, Any] = {}
    for set_name in [corpus.stem] if corpus is not None else sets:
        pairs, pairs_path = _pairs(set_name, split, corpus, trained_on)
        pairs = pairs[:limit] if limit else pairs
        started = time.perf_counter()
        hypotheses = run([p.text(source) for p in pairs])
        results[set_name if corpus is not None else f"{set_name}-{split}"] = {
            **score(hypotheses, [p.text(target) for p in pairs], target),
            "loop_rate": loop_rate(hypotheses),
            "sentences": len(pairs),
            "corpus": str(pairs_path),
            "corpus_sha256": file_sha256(pairs_path),
            "decode_seconds": round(time.perf_counter() - started, 2),
            "hypotheses": hypotheses,
        }
    summary = {
        "direction": f"{source}-{target}",
        "beam": beam,
        "bleu_tokenize": bleu_tokenize(target),
        "references": "single (each pair its own reference)",
        **{k: v for k, v in about.items() if k != "trained_on"},
        "sets": {name: {k: v for k, v in r.items() if k != "hypotheses"} for name, r in results.items()},
    }
    if not (path / MANIFEST_FILE).is_file():
        for name, r in results.items():
            (path / f"eval-{name}-beam{beam}.hyp.txt").write_text("\n".join(r["hypotheses"]) + "\n", encoding="utf-8")
        out = path / f"eval-{split}-beam{beam}.json"
        out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        summary["output"] = str(out)
    return summary
