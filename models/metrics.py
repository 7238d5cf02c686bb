"""Corpus-level BLEU and chrF with sacreBLEU, tokenized as the target language needs."""

from __future__ import annotations

import re

import sacrebleu

# A unit of 1-4 characters repeated 4 or more times in a row: "运运运运", "千理千理千理千理".
# Runs of whitespace or of digits alone ("2000000") are not loops.
LOOP = re.compile(r"(.{1,4}?)\1{3,}", re.DOTALL)

UNSPACED = {"ja": "char", "jpn": "char", "th": "char", "tha": "char", "ko": "char", "kor": "char"}


def bleu_tokenize(target_lang: str) -> str:
    """sacreBLEU's `zh` tokenizer splits Chinese characters; other scripts written without spaces
    are split into characters; the rest use the standard `13a`."""
    base = target_lang.replace("-", "_").split("_")[0]
    if base in ("zh", "zho", "cmn", "yue"):
        return "zh"
    return UNSPACED.get(base, "13a")


def score(hypotheses: list[str], references: list[str], target_lang: str) -> dict[str, float]:
    tokenize = bleu_tokenize(target_lang)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize=tokenize)
    chrf = sacrebleu.corpus_chrf(hypotheses, [references])
    return {"bleu": round(float(bleu.score), 2), "chrf": round(float(chrf.score), 2)}


def is_loop(text: str) -> bool:
    return any(not (m.group(1).isspace() or m.group(1).isdigit()) for m in LOOP.finditer(text))


def loop_rate(hypotheses: list[str]) -> float:
    """The share of outputs stuck in a loop (see LOOP)."""
    return round(sum(is_loop(h) for h in hypotheses) / max(len(hypotheses), 1), 4)
