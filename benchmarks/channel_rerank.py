"""A bundle's n-best reranked by the reverse direction's model (a noisy channel): BLEU on dev and test.

A candidate y for a source x keeps the score the search gives it (log P(y|x) over the length
penalty, plus the coverage penalty) and gains `weight` times the reverse model's log P(x|y) per
token of x: how well y explains the source (Yee et al. 2019, without their language model). Both
directions ship, so zh-en can ask en-zh, and the reverse score penalises a fluent English sentence
that says something other than the Chinese. The n-best size and weight are chosen on the Tatoeba dev
split (the real-text dev split is reported beside it); the test splits give the figures, once.

    python -m benchmarks.channel_rerank --forward bundles/zh-en --reverse bundles/en-zh \\
        --out docs/measurements/channel-rerank-zh-en.json

Sentences are translated whole (each text one sentence, cut at the model's limit, as `source_ids`
does), not cut into the service's pieces, so the beam-4 row here is this pipeline's own baseline.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.data import Pair, default_corpus_path, default_real_text_path, read_corpus, split_corpus, split_real_text
from models.metrics import score
from service.engine.bundle import load_bundle
from service.engine.reranking import channel_scores
from service.engine.scoring import Hypothesis
from service.engine.search import nbest_in_length_order
from service.engine.translator import SearchOptions, Translator

WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
SIZES = (4, 8)
BATCH = 32


@dataclass(frozen=True)
class Candidate:
    text: str
    score: float  # the forward search's
    channel: float  # the reverse model's log P(source | text) per source token


def search(translator: Translator, src_ids: list[list[int]], options: SearchOptions) -> list[list[Hypothesis]]:
    """n-best of every source, in length-sorted batches."""
    return nbest_in_length_order(lambda chunk: translator.search_ids(chunk, options), src_ids, BATCH)


def candidates(forward: Translator, reverse: Translator, sources: list[str], size: int) -> list[list[Candidate]]:
    """Each source's n-best from `forward`, with the reverse model's score of the source given it (the
    service's own scoring, service/engine/reranking.py)."""
    nbest = search(forward, forward.source_ids(sources), forward.options(beam_size=size, n_best=size))
    channel = channel_scores(forward, reverse, sources, nbest)
    return [
        [Candidate(forward.tgt_tokenizer.decode_text(h.tokens), h.score, c) for h, c in zip(hyps, cs, strict=True)]
        for hyps, cs in zip(nbest, channel, strict=True)
    ]


def reranked(cands: list[list[Candidate]], weight: float) -> list[str]:
    return [max(cs, key=lambda c: c.score + weight * c.channel).text for cs in cands]


def measure(forward: Translator, reverse: Translator, pairs: list[Pair], sizes: tuple[int, ...]) -> dict[str, Any]:
    """BLEU of beam 4 and of every (n-best size, weight) on `pairs`."""
    m = forward.manifest
    sources, refs = [p.text(m.source_lang) for p in pairs], [p.text(m.target_lang) for p in pairs]
    start = time.perf_counter()
    beam4 = search(forward, forward.source_ids(sources), forward.options(beam_size=4))
    rows: dict[str, Any] = {
        "beam 4": score([forward.tgt_tokenizer.decode_text(h[0].tokens) for h in beam4], refs, m.target_lang)
    }
    for size in sizes:
        cands = candidates(forward, reverse, sources, size)
        for weight in WEIGHTS:
            rows[f"n-best {size}, weight {weight}"] = score(reranked(cands, weight), refs, m.target_lang)
    return {"pairs": len(pairs), "seconds": round(time.perf_counter() - start, 1), "bleu": rows}


def chosen(dev: dict[str, Any]) -> tuple[int, float]:
    """The n-best size and weight with the best dev BLEU (beam 4 excluded)."""
    name = max((k for k in dev["bleu"] if k != "beam 4"), key=lambda k: dev["bleu"][k]["bleu"])
    size, weight = name.removeprefix("n-best ").split(", weight ")
    return int(size), float(weight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forward", type=Path, required=True)
    parser.add_argument("--reverse", type=Path, required=True, help="the bundle of the opposite direction")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    forward, reverse = Translator(load_bundle(args.forward)), Translator(load_bundle(args.reverse))
    tatoeba, news = (
        split_corpus(read_corpus(default_corpus_path())),
        split_real_text(read_corpus(default_real_text_path())),
    )
    results = {"tatoeba-dev": measure(forward, reverse, tatoeba["dev"], SIZES)}
    results["news-dev"] = measure(forward, reverse, news["dev"], SIZES)
    size, weight = chosen(results["tatoeba-dev"])
    for name, pairs in (("tatoeba-test", tatoeba["test"]), ("news-test", news["test"])):
        results[name] = measure(forward, reverse, pairs, (size,))
    for name, r in results.items():
        print(name, json.dumps({k: v["bleu"] for k, v in r["bleu"].items()}), flush=True)
    print(f"chosen on tatoeba-dev: n-best {size}, weight {weight}")
    if args.out:
        doc = {"forward": forward.manifest.name, "reverse": reverse.manifest.name, "chosen": [size, weight], **results}
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
