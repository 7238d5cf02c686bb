"""Corpus-level BLEU and chrF with sacreBLEU, tokenized as the target language needs."""

from __future__ import annotations

import sacrebleu

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
