"""How long a translation may be relative to its source: a high percentile of the training data's
target/source token ratios. A bundle records it (manifest.search.max_output_ratio), and the search
caps each output at ratio x source + slack tokens, so a model stuck in a loop stops early."""

from __future__ import annotations

import numpy as np

from models.data import Pair
from service.engine.translator import Translator

PERCENTILE = 99.0
SLACK = 5  # tokens: short sources vary most


def output_ratio(translator: Translator, pairs: list[Pair], percentile: float = PERCENTILE) -> float:
    """The `percentile` of target/source token ratios (end tokens counted) over `pairs`."""
    m = translator.manifest
    src = translator.src_tokenizer.encode_ids([p.text(m.source_lang) for p in pairs])
    tgt = translator.tgt_tokenizer.encode_ids([p.text(m.target_lang) for p in pairs])
    ratios = np.array([(len(t) + 1) / (len(s) + 1) for s, t in zip(src, tgt, strict=True)])
    return round(float(np.percentile(ratios, percentile)), 2)
