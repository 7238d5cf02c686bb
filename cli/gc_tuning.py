"""The garbage collector of a serving process: what startup built frozen, young collections rarer.

Under load every request allocates thousands of short-lived objects, and CPython's cyclic collector
then ran its older generations over everything startup left behind too (modules, pydantic models,
onnxruntime sessions, tokenizers): pauses of tens of milliseconds with every thread stopped, which
were the tail of a short sentence's latency under 32 clients. Frozen once the models are loaded
and warmed up (gc.freeze), those objects are never scanned again; a larger first threshold makes
young collections rarer. Measured side by side (benchmarks.settings_ab, docs/benchmarks.md).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("attention_mt")


def tune_gc(freeze: bool, thresholds: tuple[int, int, int]) -> None:
    """Freeze what exists now (after one full collection) and set the collection thresholds."""
    if freeze:
        gc.collect()
        gc.freeze()
    gc.set_threshold(*thresholds)
    log.info("gc: %d objects frozen, thresholds %s", gc.get_freeze_count(), gc.get_threshold(), extra={"event": "gc"})
