"""benchmarks.int8_kernels: each int8 form is checked for exactness on the inputs it times."""

from __future__ import annotations

import numpy as np

from benchmarks.int8_kernels import FORMS, measure


def test_every_form_is_timed_and_the_exported_form_is_exact() -> None:
    figures = measure(4, 64, 32, rounds=1, rng=np.random.default_rng(0))
    assert set(figures) == set(FORMS)
    assert all(us > 0 for us, _ in figures.values())
    assert figures["fp32"][1] is None
    assert figures["u8<128 x s8"][1] == 0 and figures["u8 x u8"][1] == 0
