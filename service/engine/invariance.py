"""Whether batching changes a translation on the CPU the service runs on.

Batch invariance rests on how onnxruntime's kernels add on the CPU at hand: the one-row MatMuls add
a padded source's zeros without changing the sum only when every width is a multiple of their
unroll (export/invariant_quant.py, tests/service/engine/test_one_row_kernels.py). An export checks it
on its own machine (`Quantization.batch_invariant`); a service on another CPU (an ARM server, an
older x86) may not have those kernels. At startup each model translates a few texts of different
lengths alone and then in one batch, through the service's own path, greedy and at its default
beam, and compares what comes back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from service.engine.requests import TranslateRequest
from service.engine.results import TextTranslation

Translate = Callable[[TranslateRequest], Awaitable[list[TextTranslation]]]


def probe_texts(text: str) -> list[str]:
    """Three texts from one, of about 1, 4 and 9 times its length: in one batch each source is padded
    to the longest, alone to its own width. Commas, not full stops, so they stay one sentence each."""
    clause = text.rstrip(".!?。！？ ") or text
    return [text, ", ".join([clause] * 4), ", ".join([clause] * 9)]


@dataclass(frozen=True)
class InvarianceCheck:
    model: str
    texts: int  # translations compared, alone against batched
    changed: int  # of them, those whose text, score, tokens, token log-probs or attention differed

    @property
    def invariant(self) -> bool:
        return self.changed == 0


def _same(a: TextTranslation, b: TextTranslation) -> bool:
    """Text, score, tokens with their log-probs, and attention, to the bit."""
    x, y = a.best, b.best
    if (x.text, x.score) != (y.text, y.score) or not np.array_equal(x.attention, y.attention):
        return False
    return [(t.text, t.logprob) for t in x.target_tokens] == [(t.text, t.logprob) for t in y.target_tokens]


async def check_batch_invariance(translate: Translate, model: str, text: str) -> InvarianceCheck:
    """`model`'s translations of `probe_texts(text)`, alone and batched, greedy and at its default beam."""
    texts = probe_texts(text)
    changed = compared = 0
    for beam in (1, None):  # None: the service's default search
        batched = await translate(TranslateRequest(texts=texts, model=model, beam_size=beam))
        for one, together in zip(texts, batched, strict=True):
            [alone] = await translate(TranslateRequest(texts=[one], model=model, beam_size=beam))
            compared += 1
            changed += not _same(alone, together)
    return InvarianceCheck(model, compared, changed)
