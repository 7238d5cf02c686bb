"""Attention-derived quality signals. They are heuristics, and every response says so.

coverage: attention mass each source token receives, summed over target rows (about 1 each for a
  one-to-one translation); a source word far under that may have been left untranslated;
entropy: per target row, in nats (low = focused, high = spread out);
unattended_source: source tokens (not special) whose coverage is under a threshold;
eos_mass: mean weight on the source end-of-sentence column.
"""

from __future__ import annotations

import numpy as np

from service.engine.attention_view import Matrix, Token
from service.engine.results import Signals


def signals(matrix: Matrix, source: list[Token], threshold: float) -> Signals:
    """Signals of a (T, S) attention matrix whose columns are `source` tokens."""
    if matrix.shape[0] == 0:
        coverage = np.zeros(len(source))
        entropy = np.zeros(0)
    else:
        coverage = matrix.sum(axis=0)  # (S,)
        safe = np.clip(matrix, 1e-12, 1.0)
        entropy = -(matrix * np.log(safe)).sum(axis=1)  # (T,)
    eos_columns = [j for j, tok in enumerate(source) if tok.special]
    eos_mass = float(matrix[:, eos_columns].sum(axis=1).mean()) if eos_columns and matrix.shape[0] else 0.0
    unattended = [j for j, tok in enumerate(source) if not tok.special and coverage[j] < threshold]
    return Signals(
        coverage=coverage.tolist(),  # Python floats, as float() of each
        entropy=entropy.tolist(),
        unattended_source=unattended,
        unattended_threshold=threshold,
        eos_mass=eos_mass,
    )
