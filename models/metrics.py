"""Corpus-level BLEU and chrF with sacreBLEU, tokenized as the target language needs."""

from __future__ import annotations

import sacrebleu


def bleu_tokenize(target_lang: str) -> str:
    """sacreBLEU's `zh` tokenizer splits Chinese characters; English uses the standard `13a`."""
    return "zh" if target_lang == "zh" else "13a"


def score(hypotheses: list[str], references: list[str], target_lang: str) -> dict[str, float]:
    tokenize = bleu_tokenize(target_lang)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize=tokenize)
    chrf = sacrebleu.corpus_chrf(hypotheses, [references])
    return {"bleu": round(float(bleu.score), 2), "chrf": round(float(chrf.score), 2)}
