"""Search settings against loops: BLEU, chrF and loop rate of a bundle on the dev sets, per setting.

The settings a bundle ships with are chosen here, on dev data only: the real-text dev split (about
500 news and health pairs) and the Tatoeba dev split. The test splits stay for the final figures.

    python -m benchmarks.search_grid --bundle bundles/en-zh --beams 1 4 --out docs/measurements/search-en-zh.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from export.length_ratio import SLACK, output_ratio
from models.data import (
    Pair,
    default_corpus_path,
    default_real_text_path,
    read_corpus,
    split_corpus,
    split_real_text,
)
from models.metrics import loop_rate, score
from service.engine.bundle import Bundle, load_bundle
from service.engine.manifest import SearchDefaults
from service.engine.translator import Translator


@dataclass(frozen=True)
class Setting:
    name: str
    no_repeat_ngram: int = 0
    repetition_penalty: float = 1.0
    ratio: str = "shipped"  # "shipped": the bundle's cap; "data": the training data's 99th percentile


SETTINGS = [
    Setting("as shipped"),
    Setting("no repeat 3-gram", no_repeat_ngram=3),
    Setting("no repeat 4-gram", no_repeat_ngram=4),
    Setting("repetition penalty 1.2", repetition_penalty=1.2),
    Setting("data ratio cap", ratio="data"),
    Setting("3-gram + data ratio cap", no_repeat_ngram=3, ratio="data"),
    Setting("3-gram + penalty 1.2 + data ratio cap", no_repeat_ngram=3, repetition_penalty=1.2, ratio="data"),
]


def _with_search(bundle: Bundle, search: SearchDefaults) -> Translator:
    manifest = bundle.manifest.model_copy(update={"search": search})
    return Translator(Bundle(bundle.path, manifest))


def _measure(translator: Translator, pairs: list[Pair], beam: int, setting: Setting) -> dict[str, Any]:
    m = translator.manifest
    options = translator.options(
        beam_size=beam, no_repeat_ngram=setting.no_repeat_ngram, repetition_penalty=setting.repetition_penalty
    )
    start = time.perf_counter()
    hyps = translator.translate_texts([p.text(m.source_lang) for p in pairs], options)
    seconds = time.perf_counter() - start
    result = score(hyps, [p.text(m.target_lang) for p in pairs], m.target_lang)
    return {**result, "loop_rate": loop_rate(hyps), "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    bundle = load_bundle(args.bundle)
    tatoeba = split_corpus(read_corpus(default_corpus_path()))
    sets = {"news-dev": split_real_text(read_corpus(default_real_text_path()))["dev"], "tatoeba-dev": tatoeba["dev"]}
    ratio = output_ratio(Translator(bundle), tatoeba["train"])
    print(f"{bundle.manifest.name}: training data's 99th-percentile output ratio {ratio} (+{SLACK} tokens)")
    rows = []
    for setting in SETTINGS:
        search = bundle.manifest.search
        if setting.ratio == "data":
            search = search.model_copy(update={"max_output_ratio": ratio, "max_output_slack": SLACK})
        translator = _with_search(bundle, search)
        for beam in args.beams:
            row = {"setting": asdict(setting), "beam": beam}
            row |= {name: _measure(translator, pairs, beam, setting) for name, pairs in sets.items()}
            rows.append(row)
            news, tat = row["news-dev"], row["tatoeba-dev"]
            print(
                f"{setting.name:40} beam {beam}: news-dev BLEU {news['bleu']:5.2f} loops {news['loop_rate']:.1%} "
                f"| tatoeba-dev BLEU {tat['bleu']:5.2f} loops {tat['loop_rate']:.1%} "
                f"| {news['seconds'] + tat['seconds']:.0f} s",
                flush=True,
            )
    if args.out:
        doc = {"bundle": bundle.manifest.name, "ratio_p99": ratio, "slack": SLACK, "rows": rows}
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
