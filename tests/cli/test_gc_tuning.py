"""`serve`'s garbage-collector settings: startup's objects frozen, thresholds set."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cli.gc_tuning import tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_gc")
def test_objects_alive_now_are_frozen_and_the_thresholds_set() -> None:
    kept = [[i] for i in range(1000)]  # tracked containers, alive
    tune_gc(freeze=True, thresholds=(10_000, 50, 100))
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == (10_000, 50, 100)


@pytest.mark.usefixtures("restored_gc")
def test_without_freezing_only_the_thresholds_change() -> None:
    gc.unfreeze()
    tune_gc(freeze=False, thresholds=(700, 10, 10))
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)
