"""Synthetic training pairs: a shipped bundle translates one side of the training pairs.

Back-translation (Sennrich et al. 2016) for a direction X->Y: the Y->X bundle translates the
Y side of the training pairs, and (synthetic X, real Y) pairs are added to X->Y's training data
(`data.synthetic`). The real target side is what the model learns to produce, so synthetic noise
lands on the source, where it regularises. The other direction's translations of the same
pairs (forward translation) make data diversification (Nguyen et al. 2020).

With `--reverse`, each source's 8-best is reranked by the bundle of the opposite direction, as a
request's `rerank` is (service/engine/reranking.py): sequence-level distillation from the
reranked model (Kim & Rush 2016), whose outputs score 1.3 BLEU above the bundle's own on zh-en.

Only training splits are translated (Tatoeba's and the real text's, with no name augmentation):
nothing of a dev or test split becomes training data. Each synthetic pair keeps its original's
attribution (CC BY), marked as a machine translation.

    python -m models.synthetic --bundle bundles/en-zh --out runs/bt/en-zh.tsv [--beam 1]
    python -m models.synthetic --bundle bundles/zh-en --reverse bundles/en-zh --out runs/kd/zh-en-rerank.tsv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from models.data import (
    CorpusError,
    Pair,
    default_corpus_path,
    default_real_text_path,
    read_corpus,
    split_corpus,
    split_real_text,
)
from service.engine.bundle import load_bundle
from service.engine.errors import EngineError
from service.engine.reranking import N_BEST, channel_scores, reranked
from service.engine.translator import Translator


def training_pairs(corpus: Path, real_text: Path | None) -> list[Pair]:
    """The pairs a run may train on: Tatoeba's train split, and the real text's when given."""
    pairs = split_corpus(read_corpus(corpus))["train"]
    if real_text is not None:
        pairs += split_real_text(read_corpus(real_text))["train"]
    return pairs


def reranked_texts(forward: Translator, reverse: Translator, texts: list[str], batch_size: int = 32) -> list[str]:
    """Each text (whole, as one sentence) translated by `forward`: its 8-best reranked by `reverse`."""
    options, weight = forward.options(beam_size=N_BEST, n_best=N_BEST), forward.manifest.search.rerank_weight
    # like lengths batch well; each batch is scored as it is decoded (not search.nbest_in_length_order
    # over all texts first), so only one batch's n-best lists, with their attention, are held at a time
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: dict[int, str] = {}
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        sources = [texts[i] for i in chunk]
        nbests = forward.search_ids(forward.source_ids(sources), options)
        for i, hyps, channel in zip(chunk, nbests, channel_scores(forward, reverse, sources, nbests), strict=True):
            out[i] = forward.tgt_tokenizer.decode_text(reranked(hyps, channel, weight, 1)[0].tokens)
    return [out[i] for i in range(len(texts))]


def translate_side(
    pairs: list[Pair], bundle: Path, beam: int, batch_size: int = 32, reverse: Path | None = None
) -> list[Pair]:
    """Each pair with its bundle-source side kept and its other side replaced by the bundle's
    translation (by `reverse`'s bundle reranking an 8-best when given, and then `beam` is unused); pairs
    the bundle leaves empty are dropped."""
    translator = Translator(load_bundle(bundle))
    source, target = translator.manifest.source_lang, translator.manifest.target_lang
    if {source, target} != {"en", "zh"}:
        raise ValueError(f"{bundle} translates {source}->{target}; synthetic pairs are English-Chinese")
    texts = [p.text(source) for p in pairs]
    if reverse is None:
        outputs = translator.translate_texts(texts, translator.options(beam_size=beam), batch_size)
        note = f"machine translation by {bundle.name}"
    else:
        outputs = reranked_texts(translator, Translator(load_bundle(reverse)), texts, batch_size)
        note = f"machine translation by {bundle.name}, reranked by {reverse.name}"
    synthetic = []
    for pair, output in zip(pairs, outputs, strict=True):
        if output.strip():
            sides = {source: pair.text(source), target: output}
            synthetic.append(Pair(sides["en"], sides["zh"], f"{pair.attribution} ({note})".strip()))
    return synthetic


def write_pairs(pairs: list[Pair], out: Path) -> None:
    """English<TAB>Chinese<TAB>attribution, as models.data.read_corpus reads it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = ("\t".join((p.en, p.zh, p.attribution)).replace("\n", " ") + "\n" for p in pairs)
    out.write_text("".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, required=True, help="the bundle that translates")
    parser.add_argument("--out", type=Path, required=True, help="the TSV to write")
    parser.add_argument("--corpus", type=Path, help="Tatoeba TSV (default: the shared corpus)")
    parser.add_argument("--no-real-text", action="store_true", help="Tatoeba's training split only")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument(
        "--reverse", type=Path, help="the opposite direction's bundle: rerank an 8-best by it (--beam is then unused)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        real_text = None if args.no_real_text else default_real_text_path()
        pairs = training_pairs(args.corpus or default_corpus_path(), real_text)
        synthetic = translate_side(pairs, args.bundle, args.beam, reverse=args.reverse)
    except (CorpusError, EngineError, ValueError) as exc:  # a wrong path or bundle: say which, no traceback
        raise SystemExit(f"models.synthetic: {exc}") from exc
    write_pairs(synthetic, args.out)
    seconds = time.perf_counter() - started
    print(f"{len(synthetic):,} of {len(pairs):,} pairs translated in {seconds:.0f} s -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
