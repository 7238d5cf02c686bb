"""Dynamic batching with a fake decoder: coalescing, ordering, bounds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable

import pytest

from service.engine.batcher import Batcher, BatcherConfig
from service.engine.errors import Overloaded


class Recorder:
    """Decodes by echoing ids reversed, slowly, and records every batch it was given."""

    def __init__(self, delay: float = 0.02) -> None:
        self.batches: list[tuple[Hashable, list[list[int]]]] = []
        self.delay = delay

    def __call__(self, key: Hashable, src_ids: list[list[int]]) -> list[list[int]]:
        self.batches.append((key, src_ids))
        time.sleep(self.delay)
        return [list(reversed(ids)) for ids in src_ids]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_concurrent_requests_share_a_batch_sorted_by_length_and_answers_route_back() -> None:
    recorder = Recorder()

    async def main() -> list[list[list[int]]]:
        batcher: Batcher[list[int]] = Batcher(recorder, BatcherConfig(max_batch=16, max_delay_s=0.05))
        batcher.start()
        requests = [[[i] * (5 - i), [i, 99]] for i in range(4)]  # varied lengths
        results = await asyncio.gather(*(batcher.submit("m", r) for r in requests))
        await batcher.stop()
        return results

    results = run(main())
    assert results == [[[i] * (5 - i), [99, i]] for i in range(4)]
    assert len(recorder.batches) == 1
    lengths = [len(x) for x in recorder.batches[0][1]]
    assert lengths == sorted(lengths) and len(lengths) == 8


def test_max_batch_is_respected_and_keys_do_not_mix() -> None:
    recorder = Recorder(delay=0.0)

    async def main() -> None:
        batcher: Batcher[list[int]] = Batcher(recorder, BatcherConfig(max_batch=3, max_delay_s=0.02))
        batcher.start()
        await asyncio.gather(*(batcher.submit("a" if i % 2 else "b", [[i]]) for i in range(10)))
        await batcher.stop()

    run(main())
    assert all(len(ids) <= 3 for _, ids in recorder.batches)
    for key, ids in recorder.batches:
        assert all((x[0] % 2 == 1) == (key == "a") for x in ids)
    assert sum(len(ids) for _, ids in recorder.batches) == 10


def test_batching_off_decodes_each_request_alone() -> None:
    recorder = Recorder(delay=0.0)

    async def main() -> None:
        batcher: Batcher[list[int]] = Batcher(recorder, BatcherConfig(batching=False))
        batcher.start()
        await asyncio.gather(*(batcher.submit("m", [[i], [i, i]]) for i in range(5)))
        await batcher.stop()

    run(main())
    assert len(recorder.batches) == 5 and all(len(ids) == 2 for _, ids in recorder.batches)


def test_a_full_queue_refuses_at_once_with_retry_after() -> None:
    async def main() -> None:
        batcher: Batcher[list[int]] = Batcher(Recorder(delay=0.2), BatcherConfig(max_queue=4, retry_after_s=3))
        batcher.start()
        first = asyncio.ensure_future(batcher.submit("m", [[1], [2], [3]]))
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded) as info:
            await batcher.submit("m", [[4], [5]])
        assert info.value.retry_after == 3
        assert await first == [[1], [2], [3]]
        assert await batcher.submit("m", [[4], [5]]) == [[4], [5]]  # room again afterwards
        await batcher.stop()

    run(main())


def test_a_failing_batch_fails_its_requests_only() -> None:
    calls = []

    def flaky(key: Hashable, src_ids: list[list[int]]) -> list[list[int]]:
        calls.append(key)
        if key == "bad":
            raise RuntimeError("boom")
        return src_ids

    async def main() -> None:
        batcher: Batcher[list[int]] = Batcher(flaky, BatcherConfig(max_delay_s=0.01))
        batcher.start()
        good, bad = await asyncio.gather(
            batcher.submit("ok", [[1]]), batcher.submit("bad", [[2]]), return_exceptions=True
        )
        assert good == [[1]] and isinstance(bad, RuntimeError)
        assert await batcher.submit("ok", [[3]]) == [[3]]
        await batcher.stop()

    run(main())
