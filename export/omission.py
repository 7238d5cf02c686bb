"""How well the "unattended source word" signal catches words a translation dropped.

Ground truth, from word alignments: eflomal links every source word of a test set to words of
the reference, and, in a second run, to words of the model's translation (both runs align the
test pairs together with the training pairs, for the aligner's statistics). A source content
word linked to some reference word is checked: it counts as *kept* when one of its reference
words appears in the translation (Chinese: as a substring, so segmentation cannot hide it) or the
aligner links it to a word of the translation (a synonym, another inflection), and as *dropped*
otherwise. Function words, and words the reference does not link (nothing to check them
against), are left out. What the proxy still gets wrong: a mistranslated word that the aligner
links anyway counts as kept, and a correct paraphrase that it cannot link counts as dropped.

The flag is the service's own: a word is unattended when its coverage (the attention it gets,
summed over the translation's target rows: the sum over its pieces at word granularity) is
under the threshold. Each threshold's precision and recall are reported on a dev and a test
split; the threshold is chosen on dev (choose_threshold) and its figures are taken on test.

    python -m export.omission --bundles bundles --model en-zh [--write]

`--write` records the chosen threshold and its test figures in the bundle's manifest; the service
then flags at that threshold (MT_UNATTENDED_THRESHOLD overrides it for every model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jieba

from export.bundle_writer import place, staging_dir, write_manifest
from models.alignments import Link, symmetrised
from models.data import Pair, default_corpus_path, default_real_text_path, read_corpus, split_corpus, split_real_text
from service.api.app import build_service, session_config
from service.engine.bundle import load_bundle
from service.engine.catalog import Catalog
from service.engine.manifest import OmissionFlag
from service.engine.requests import AttentionOptions, TranslateRequest
from service.engine.results import Rendered
from service.settings import Settings

# eflomal samples (seeded from /dev/urandom, no seed option): more samplers, steadier links; with
# its default 3, J moved by up to 0.03 between two runs on the same 400 pairs
SAMPLERS = 8
# coverage is a sum over rows, so a word can get more than 1; up to 1.0 ("less than one row's worth")
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)
EN_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+(?:[.,]\d+)*")
_EN_STOP = """a an the of to in on at for by with from and or but if as is are was were be been being am do
does did have has had it its this that these those there here he she they we i you me him her them us my
your his their our not no so than then too very can could will would shall should may might must just also
about into over up down out off which who whom what when where why how all any some such only own same s t"""
_ZH_STOP = (
    "的 了 在 是 和 与 及 也 都 就 而 并 被 把 将 对 从 向 以 之 其 这 那 个 一 上 中 为 着 过 等 或 但 又 还 则 所"
)
EN_STOP = frozenset(_EN_STOP.split())  # function words: a dropped "the" is no omission worth flagging
ZH_STOP = frozenset(_ZH_STOP.split())


@dataclass(frozen=True)
class Word:
    text: str
    span: tuple[int, int]  # character offsets in its sentence


def words(text: str, lang: str) -> list[Word]:
    """English: letters or numbers; Chinese: jieba's words, punctuation and spaces dropped."""
    if lang == "en":
        return [Word(m.group(), m.span()) for m in EN_WORD.finditer(text)]
    found, start = [], 0
    for token in jieba.cut(text, HMM=False):
        if token.strip() and any(ch.isalnum() for ch in token):
            found.append(Word(token, (start, start + len(token))))
        start += len(token)
    return found


def content(word: Word, lang: str) -> bool:
    key = word.text.lower()
    return key not in (EN_STOP if lang == "en" else ZH_STOP)


def _key(text: str, lang: str) -> str:
    text = text.lower()
    return text[:-1] if lang == "en" and len(text) > 3 and text.endswith("s") else text


def word_links(pairs: Sequence[tuple[list[Word], list[Word]]]) -> list[set[Link]]:
    """Symmetrised eflomal links between the two sides' words, per pair."""
    src = [" ".join(w.text.lower() for w in s) or "_" for s, _ in pairs]
    tgt = [" ".join(w.text.lower() for w in t) or "_" for _, t in pairs]
    return symmetrised(src, tgt, SAMPLERS)


def word_coverage(rendered: Rendered, word: Word) -> float:
    """The attention a source word got: the coverage of the pieces that overlap it."""
    total = 0.0
    for token, cov in zip(rendered.source_tokens, rendered.signals.coverage, strict=True):
        start, end = token.start, token.end
        if not token.special and start < word.span[1] and word.span[0] < end:
            total += cov
    return total


@dataclass(frozen=True)
class Case:
    coverage: float
    dropped: bool


@dataclass(frozen=True)
class Example:
    """One test sentence: its words, the reference's, the translation's, and the links to both."""

    source: list[Word]
    reference: list[Word]
    to_reference: set[Link]
    translation: Rendered
    to_translation: set[Link]


def cases_of(example: Example, src_lang: str, tgt_lang: str) -> list[Case]:
    text = example.translation.text.lower()
    present = {_key(w.text, tgt_lang) for w in words(example.translation.text, tgt_lang)}
    linked_out = {s for s, _ in example.to_translation}
    found = []
    for i, word in enumerate(example.source):
        linked = [example.reference[t] for s, t in example.to_reference if s == i]
        if not linked or not content(word, src_lang):
            continue
        appears = any(_key(w.text, tgt_lang) in present or (tgt_lang != "en" and w.text in text) for w in linked)
        kept = appears or i in linked_out
        found.append(Case(word_coverage(example.translation, word), not kept))
    return found


def precision_recall(cases: list[Case]) -> list[dict[str, float]]:
    """Per threshold: words flagged, precision, recall, false-positive rate and Youden's J
    (recall - false-positive rate: how much better than chance the flag separates the two)."""
    dropped = sum(c.dropped for c in cases)
    kept = len(cases) - dropped
    rows = []
    for t in THRESHOLDS:
        flagged = [c for c in cases if c.coverage < t]
        hits = sum(c.dropped for c in flagged)
        p = hits / len(flagged) if flagged else 0.0
        r = hits / dropped if dropped else 0.0
        fpr = (len(flagged) - hits) / kept if kept else 0.0
        rows.append(
            {
                "threshold": t,
                "flagged": len(flagged),
                "precision": round(p, 3),
                "recall": round(r, 3),
                "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0,
                "false_positive_rate": round(fpr, 3),
                "j": round(r - fpr, 3),
            }
        )
    return rows


def choose_threshold(rows: list[dict[str, float]], min_j: float = 0.1) -> float:
    """The threshold with the largest Youden's J. F1 would not do: where most content words are
    dropped (a model that fails on the text), flagging everything maximises it. When no
    threshold separates dropped from kept words by at least `min_j` (10 points of recall over
    the false-positive rate), 0: flag nothing, since a flag that is right by chance only
    misleads. (At 0.05, the en-zh before issue 18 passed with J 0.055 at coverage 1.0: over half
    its words underlined, at 72% precision against a 71% base rate.)"""
    best = max(rows, key=lambda row: row["j"])
    return best["threshold"] if best["j"] >= min_j else 0.0


async def _translate(settings: Settings, model: str, texts: list[str], beam: int) -> list[Rendered]:
    service = build_service(Catalog.load(settings.bundles, session_config(settings)), settings)
    service.scheduler.start()
    try:
        out: list[Rendered] = []
        for i in range(0, len(texts), 32):
            request = TranslateRequest(texts[i : i + 32], model=model, beam_size=beam, attention=AttentionOptions())
            out += [r.best for r in await service.translate(request)]
        return out
    finally:
        await service.scheduler.stop()


def measure(
    bundles: Path, model: str, langs: tuple[str, str], sets: dict[str, list[Pair]], helpers: list[Pair], beam: int = 4
) -> dict[str, list[Case]]:
    """Translate each set with the bundle and find its content words, dropped or kept, with
    their coverage; `helpers` (the training pairs) are aligned along for the aligner's statistics."""
    src_lang, tgt_lang = langs

    def sides(pairs: list[Pair]) -> list[tuple[list[Word], list[Word]]]:
        return [(words(p.text(src_lang), src_lang), words(p.text(tgt_lang), tgt_lang)) for p in pairs]

    test = [pair for pairs in sets.values() for pair in pairs]
    examples, extra = sides(test), sides(helpers)
    rendered = asyncio.run(_translate(Settings(bundles=bundles), model, [p.text(src_lang) for p in test], beam))
    outputs = [words(r.text, tgt_lang) for r in rendered]
    to_ref = word_links([*examples, *extra])
    to_hyp = word_links([*((s, h) for (s, _), h in zip(examples, outputs, strict=True)), *extra])
    found: dict[str, list[Case]] = {}
    i = 0
    for name, pairs in sets.items():
        found[name] = []
        for _ in pairs:
            source, reference = examples[i]
            example = Example(source, reference, to_ref[i], rendered[i], to_hyp[i])
            found[name] += cases_of(example, src_lang, tgt_lang)
            i += 1
    return found


def summary(cases: list[Case]) -> dict[str, object]:
    dropped = sum(c.dropped for c in cases)
    return {
        "content_words": len(cases),
        "dropped": dropped,
        "dropped_share": round(dropped / len(cases), 3) if cases else 0.0,
        "by_threshold": precision_recall(cases),
    }


def flag_for(dev: list[Case], test: list[Case], measured_on: str) -> OmissionFlag:
    """The threshold chosen on dev, and its figures on test."""
    threshold = choose_threshold(precision_recall(dev))
    dropped = sum(c.dropped for c in test)
    flagged = [c for c in test if c.coverage < threshold]
    hits = sum(c.dropped for c in flagged)
    return OmissionFlag(
        threshold=threshold,
        precision=round(hits / len(flagged), 3) if flagged else 0.0,
        recall=round(hits / dropped, 3) if dropped else 0.0,
        dropped_share=round(dropped / len(test), 3) if test else 0.0,
        content_words=len(test),
        measured_on=measured_on,
    )


def write_flag(bundle_dir: Path, flag: OmissionFlag) -> None:
    """Record the flag in the bundle's manifest (graphs and tokenizers untouched, written atomically)."""
    bundle = load_bundle(bundle_dir)
    m = bundle.manifest
    fields = m.model_dump(exclude={"files"})
    fields["attention_view"] = m.attention_view.model_copy(update={"omission": flag})
    staged = staging_dir(bundle_dir)
    try:
        for name in m.files:
            shutil.copy2(bundle_dir / name, staged / name)
        write_manifest(staged, fields)
        place(staged, bundle_dir, force=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundles", type=Path, default=Path("bundles"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--set", choices=("news", "tatoeba"), default="news", help="which test split")
    parser.add_argument("--limit", type=int, default=0, help="dev and test pairs to use (0: all)")
    parser.add_argument("--write", action="store_true", help="record the chosen threshold in the bundle's manifest")
    args = parser.parse_args(argv)
    manifest = json.loads((args.bundles / args.model / "manifest.json").read_text())
    langs = manifest["source_lang"], manifest["target_lang"]
    tatoeba = split_corpus(read_corpus(default_corpus_path()))
    news = split_real_text(read_corpus(default_real_text_path()))
    chosen = news if args.set == "news" else tatoeba
    sets = {name: chosen[name][: args.limit or None] for name in ("dev", "test")}
    cases = measure(args.bundles, args.model, langs, sets, tatoeba["train"] + news["train"], args.beam)
    where = f"{args.set}-test, {len(sets['test'])} pairs, beam {args.beam}; threshold chosen on {args.set}-dev"
    flag = flag_for(cases["dev"], cases["test"], where)
    report = {
        "model": args.model,
        "set": args.set,
        **{k: summary(v) for k, v in cases.items()},
        "flag": flag.model_dump(),
    }
    print(json.dumps(report, indent=1))
    if args.write:
        write_flag(args.bundles / args.model, flag)


if __name__ == "__main__":
    main()
