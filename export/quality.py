"""BLEU and chrF of a bundle through its own engine and the service's search: what users get."""

from __future__ import annotations

import hashlib

from models.metrics import bleu_tokenize, loop_rate, score
from service.engine.manifest import Score
from service.engine.translator import Translator


def measure_quality(
    translator: Translator, sources: list[str], references: list[str], split: str, beams: tuple[int, ...]
) -> list[Score]:
    """One Score per beam size, decoded with the bundle's default search at that beam size."""
    target = translator.manifest.target_lang
    digest = hashlib.sha256("\n".join(f"{s}\t{r}" for s, r in zip(sources, references, strict=True)).encode())
    scores = []
    for beam in beams:
        options = translator.options(beam_size=beam)
        hypotheses = translator.translate_texts(sources, options)
        result = score(hypotheses, references, target)
        scores.append(
            Score(
                split=split,
                sentences=len(sources),
                sha256=digest.hexdigest(),
                beam=beam,
                alpha=options.alpha,
                coverage_penalty=options.coverage_penalty,
                bleu=result["bleu"],
                chrf=result["chrf"],
                bleu_tokenize=bleu_tokenize(target),
                loop_rate=loop_rate(hypotheses),
                no_repeat_ngram=options.no_repeat_ngram,
                repetition_penalty=options.repetition_penalty,
            )
        )
    return scores
