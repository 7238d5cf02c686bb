"""benchmarks.engines: a batch split over threads kept for the engine's life."""

from __future__ import annotations

import threading
from pathlib import Path

from benchmarks.engines import EngineSpec, OrtEngine, SplitThreads


def test_a_split_batch_comes_back_whole_in_input_order(bundle_dir: Path) -> None:
    bundle = str(bundle_dir / "en-zh-int8")
    one = OrtEngine(EngineSpec("ort", "int8", bundle, "intra1", 1, 1))
    two = OrtEngine(EngineSpec("ort", "int8", bundle, "split2x1", 1, 2))
    sources = [[5, 9, 14, 3], [7, 8, 11, 3], [6, 3], [12, 10, 9, 8, 3], [4, 13, 3]]  # 3 and 2 a part
    for beam in (1, 4):
        expected = one.translate(sources, beam, None, 12)
        assert two.translate(sources, beam, None, 12) == expected
        assert two.translate(sources[:1], beam, None, 12) == expected[:1]  # one sentence: no split


def test_the_helper_threads_are_kept_between_calls() -> None:
    split = SplitThreads(2)
    seen: list[int] = []

    def call(chunk: list[list[int]]) -> list[list[int]]:
        seen.append(threading.get_ident())
        return [[len(ids)] for ids in chunk]

    for _ in range(3):
        assert split([[1], [2, 2], [3, 3, 3]], call) == [[1], [2], [3]]
    caller = threading.get_ident()
    assert seen.count(caller) == 3 and len(set(seen) - {caller}) == 1  # one helper, the same each call
