"""The scheduler with scripted cohorts: grouping, step interleaving, bounds, leaving callers, faults.

The cohorts here are scripted (a sentence of n ids finishes after n steps and answers its ids
reversed) so that every assertion is about scheduling; tests/service/engine/test_scheduling_real.py
runs the same scheduler over real bundles. Nothing waits on wall-clock time: threads meet on events.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from typing import cast

import pytest

from service.engine.errors import NotReady, Overloaded
from service.engine.scheduler import Scheduler, SchedulerConfig

WAIT = 30.0  # generous: a loaded CI machine may be slow, but a correct scheduler never gets near it


class Scripted:
    """A cohort: sentence i finishes after len(ids) steps."""

    def __init__(
        self, src_ids: list[list[int]], gate: threading.Event | None = None, log: list[int] | None = None
    ) -> None:
        self.src_ids, self.gate, self.log = src_ids, gate, log if log is not None else []
        self.left = {i: len(ids) for i, ids in enumerate(src_ids)}
        self.steps = 0
        self.dropped: set[int] = set()
        self.finished_at: dict[int, int] = {}  # sentence -> the step it finished at

    @property
    def done(self) -> bool:
        return not self.left

    def step(self) -> list[tuple[int, list[int]]]:
        if self.gate is not None:
            assert self.gate.wait(WAIT)
        self.steps += 1
        self.log.append(id(self))  # the order of every cohort's steps, written by the inference thread
        finished = []
        for i in list(self.left):
            self.left[i] -= 1
            if self.left[i] == 0:
                del self.left[i]
                self.finished_at[i] = self.steps
                finished.append((i, list(reversed(self.src_ids[i]))))
        return finished

    def drop(self, sentences: set[int]) -> None:
        self.dropped |= sentences
        for i in sentences:
            self.left.pop(i, None)

    def join(self, other: Scripted) -> int | None:
        """A bundle whose decoder cannot mix steps: later sentences start cohorts of their own."""
        return None


class Joinable(Scripted):
    """A cohort that takes later sentences mid-decode (search.Cohort over a slotted cache)."""

    def join(self, other: Scripted) -> int | None:
        first = len(self.src_ids)
        self.src_ids = [*self.src_ids, *other.src_ids]
        self.left.update({first + i: n for i, n in other.left.items()})
        return first


class Starter:
    """Starts Scripted cohorts and records each (key, sentences); `gates` hold a key's steps."""

    def __init__(self) -> None:
        self.cohorts: list[tuple[Hashable, Scripted]] = []
        self.gates: dict[Hashable, threading.Event] = {}
        self.fail_keys: set[Hashable] = set()
        self.log: list[int] = []
        self.kind: type[Scripted] = Scripted

    def __call__(self, key: Hashable, src_ids: list[list[int]]) -> Scripted:
        if key in self.fail_keys:
            raise RuntimeError(f"cannot encode {key}")
        cohort = self.kind(src_ids, self.gates.get(key), self.log)
        self.cohorts.append((key, cohort))
        return cohort


async def until(condition: object, what: str) -> None:
    """Poll a condition set by the inference thread (it cannot await)."""
    for _ in range(int(WAIT / 0.005)):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def test_concurrent_requests_share_a_cohort_and_answers_route_back() -> None:
    starter = Starter()
    starter.gates["m"] = gate = threading.Event()

    async def main() -> list[list[list[int]]]:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(max_batch=16, max_cohorts=1))
        scheduler.start()
        first = asyncio.ensure_future(scheduler.submit("m", [[9]]))  # starts a cohort that waits at its gate
        await until(lambda: starter.cohorts, "the first cohort")
        rest = [asyncio.ensure_future(scheduler.submit("m", [[i, i + 1], [i]])) for i in range(3)]
        await until(lambda: scheduler.depth == 7, "the queue to fill")
        gate.set()
        results = [await first, *[await r for r in rest]]
        await scheduler.stop()
        return results

    results = asyncio.run(main())
    assert results == [[[9]], [[1, 0], [0]], [[2, 1], [1]], [[3, 2], [2]]]
    assert [len(c.src_ids) for _, c in starter.cohorts] == [1, 6]  # the three later requests shared one


def test_sentences_of_other_keys_never_share_a_cohort() -> None:
    starter = Starter()

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(max_batch=3))
        scheduler.start()
        await asyncio.gather(*(scheduler.submit("a" if i % 2 else "b", [[i]]) for i in range(10)))
        await scheduler.stop()

    asyncio.run(main())
    for key, cohort in starter.cohorts:
        assert len(cohort.src_ids) <= 3
        assert all((ids[0] % 2 == 1) == (key == "a") for ids in cohort.src_ids)


def test_without_batching_a_request_is_decoded_alone() -> None:
    starter = Starter()

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(batching=False))
        scheduler.start()
        await asyncio.gather(*(scheduler.submit("m", [[i], [i, i]]) for i in range(5)))
        await scheduler.stop()

    asyncio.run(main())
    assert sorted(c.src_ids[0][0] for _, c in starter.cohorts) == list(range(5))
    assert all(len(c.src_ids) == 2 for _, c in starter.cohorts)


def test_a_long_sentence_never_holds_a_short_one_behind_it() -> None:
    starter = Starter()
    starter.gates["m"] = gate = threading.Event()

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(max_cohorts=2))
        scheduler.start()
        long = asyncio.ensure_future(scheduler.submit("m", [list(range(200))]))
        await until(lambda: starter.cohorts, "the long cohort")
        short = asyncio.ensure_future(scheduler.submit("m", [[1, 2]]))
        await until(lambda: scheduler.depth == 2, "the short sentence to queue")
        gate.set()
        await short
        assert len(await long) == 1
        await scheduler.stop()
        (_, long_cohort), (_, short_cohort) = starter.cohorts
        short_end = len(starter.log) - starter.log[::-1].index(id(short_cohort))
        assert starter.log[:short_end].count(id(long_cohort)) <= 3  # the short one joined the next step

    asyncio.run(main())


def test_new_sentences_join_the_running_cohort_and_leave_it_as_they_finish() -> None:
    starter = Starter()
    starter.kind = Joinable
    starter.gates["m"] = gate = threading.Event()

    async def main() -> None:
        # the keys stand for search options of one model: "m" and "x" may share a batch
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(max_batch=8), group=lambda key: "model")
        scheduler.start()
        long = asyncio.ensure_future(scheduler.submit("m", [list(range(50))]))
        await until(lambda: starter.cohorts, "the long cohort")
        # other search options (another key) join too: the parts of one cohort search on their own
        short = [asyncio.ensure_future(scheduler.submit(key, [[i, i + 1], [i]])) for i, key in enumerate("mxm")]
        await until(lambda: scheduler.depth == 7, "the short sentences to queue")
        gate.set()
        assert [await s for s in short] == [[[1, 0], [0]], [[2, 1], [1]], [[3, 2], [2]]]
        assert await long == [list(range(49, -1, -1))]
        await scheduler.stop()

    asyncio.run(main())
    (_, running), *_ = starter.cohorts
    assert len(running.src_ids) == 7  # every later sentence joined it
    assert set(starter.log) == {id(running)}  # the cohorts that joined never stepped on their own
    # the joined sentences finished (and were answered: the scheduler settles each at its step)
    # within their own length of joining, while the long one decoded on to its 50th step
    joined_at = running.finished_at[1] - 2
    assert all(step - joined_at <= 2 for sentence, step in running.finished_at.items() if sentence)
    assert running.finished_at[0] == running.steps == 50


class Stepped(Joinable):
    """A joinable cohort that takes one step per permit of `permits` (the test releases them)."""

    permits = threading.Semaphore(0)

    def step(self) -> list[tuple[int, list[int]]]:
        assert self.permits.acquire(timeout=WAIT)
        return super().step()


def model_of(key: Hashable) -> Hashable:
    """The model of a (model, search options) key: the batches its sentences may join."""
    return cast(tuple[str, str], key)[0]


def stepped() -> tuple[Starter, threading.Semaphore]:
    """A starter of Stepped cohorts, and the semaphore each of their steps waits on."""
    starter = Starter()
    starter.kind = Stepped
    Stepped.permits = permits = threading.Semaphore(0)
    return starter, permits


async def finished(
    scheduler: Scheduler[list[int]], permits: threading.Semaphore, *requests: asyncio.Future[list[list[int]]]
) -> list[list[list[int]]]:
    """Let every step left run; each request's results, in order, with the scheduler stopped."""
    for _ in range(20):
        permits.release()
    results = [await r for r in requests]
    await scheduler.stop()
    return results


@pytest.mark.parametrize(
    ("join_delay_s", "beam_join_delay_s", "beam"),
    [(0.0, 0.0, False), (60.0, 0.0, False), (0.0, 60.0, True), (60.0, 0.0, True), (0.0, 60.0, False)],
)
def test_while_a_batch_runs_newcomers_wait_for_company_up_to_the_join_delay(
    join_delay_s: float, beam_join_delay_s: float, beam: bool
) -> None:
    """Arrivals at two different steps: with no join delay each joins at the next step; with one,
    they wait (the batch steps on) and are encoded together. A beam search's sentences wait the
    beam join delay, others the join delay. An idle scheduler never waits: the two start at once
    when the batch ends, long before 60 s."""
    starter, permits = stepped()
    waits = beam_join_delay_s if beam else join_delay_s

    async def main() -> list[list[list[int]]]:
        config = SchedulerConfig(max_batch=8, join_delay_s=join_delay_s, beam_join_delay_s=beam_join_delay_s)
        scheduler: Scheduler[list[int]] = Scheduler(starter, config, wide=lambda key: beam)
        scheduler.start()
        first = asyncio.ensure_future(scheduler.submit("m", [[1, 2, 3, 4]]))  # 4 steps
        await until(lambda: starter.cohorts, "the first cohort")
        permits.release()  # step 1
        a = asyncio.ensure_future(scheduler.submit("m", [[5, 6]]))
        await until(lambda: scheduler.depth == 2, "the first newcomer")
        permits.release()  # step 2; then the newcomer joins (no delay) or waits
        if not waits:  # it starts at the next admission; an arrival before that would join it
            await until(lambda: len(starter.cohorts) == 2, "the first newcomer's start")
        b = asyncio.ensure_future(scheduler.submit("m", [[7]]))
        await until(lambda: scheduler.depth == 3, "the second newcomer")
        return await finished(scheduler, permits, first, a, b)

    assert asyncio.run(main()) == [[[4, 3, 2, 1]], [[6, 5]], [[7]]]
    if waits:
        assert [c.src_ids for _, c in starter.cohorts] == [[[1, 2, 3, 4]], [[5, 6], [7]]]
    else:
        assert [len(c.src_ids) for _, c in starter.cohorts] == [3, 1, 1]  # both joined the first


def test_a_model_with_nothing_running_never_waits_for_another_models_batch() -> None:
    """The join delay is for sentences that can join the running batch: one of another model starts
    at the next step even with a 60 s delay (a wrong wait would time this test out)."""
    starter, permits = stepped()

    async def main() -> list[list[list[int]]]:
        config = SchedulerConfig(max_batch=8, join_delay_s=60.0)
        scheduler: Scheduler[list[int]] = Scheduler(starter, config, group=model_of)
        scheduler.start()
        running = asyncio.ensure_future(scheduler.submit(("en-zh", "greedy"), [[1, 2, 3]]))
        await until(lambda: starter.cohorts, "the first cohort")
        other = asyncio.ensure_future(scheduler.submit(("zh-en", "greedy"), [[4, 5]]))
        await until(lambda: scheduler.depth == 2, "the other model's sentence")
        permits.release()  # step 1 of the running batch; the other model starts right after it
        await until(lambda: len(starter.cohorts) == 2, "the other model's cohort")
        return await finished(scheduler, permits, running, other)

    assert asyncio.run(main()) == [[[3, 2, 1]], [[5, 4]]]
    assert [key for key, _ in starter.cohorts] == [("en-zh", "greedy"), ("zh-en", "greedy")]
    assert [len(c.src_ids) for _, c in starter.cohorts] == [1, 1]  # a batch never takes another model's rows


def test_a_beam_search_waiting_for_company_does_not_hold_back_greedy_sentences() -> None:
    """A beam sentence waits up to its long join delay while its model's batch runs; a greedy
    sentence queued after it joins at the next step all the same (holding it behind the beam one
    would time this test out), and the beam one starts once the batch ends."""
    starter, permits = stepped()

    async def main() -> list[list[list[int]]]:
        config = SchedulerConfig(max_batch=8, join_delay_s=0.0, beam_join_delay_s=60.0)
        beam_key = ("m", "beam")
        scheduler: Scheduler[list[int]] = Scheduler(starter, config, group=model_of, wide=lambda key: key == beam_key)
        scheduler.start()
        running = asyncio.ensure_future(scheduler.submit(("m", "greedy"), [[1, 2, 3, 4]]))
        await until(lambda: starter.cohorts, "the first cohort")
        beam = asyncio.ensure_future(scheduler.submit(beam_key, [[5, 6]]))
        await until(lambda: scheduler.depth == 2, "the beam sentence")
        greedy = asyncio.ensure_future(scheduler.submit(("m", "greedy"), [[7]]))
        await until(lambda: scheduler.depth == 3, "the greedy sentence")
        permits.release()  # step 1; then the greedy newcomer joins while the beam one waits
        await until(lambda: len(starter.cohorts) == 2, "the greedy newcomer's start")
        return await finished(scheduler, permits, running, beam, greedy)

    assert asyncio.run(main()) == [[[4, 3, 2, 1]], [[6, 5]], [[7]]]
    assert [key for key, _ in starter.cohorts] == [("m", "greedy"), ("m", "greedy"), ("m", "beam")]


@pytest.mark.parametrize("express_tokens", [0, 4])
def test_a_short_sentence_among_long_ones_is_decoded_first_and_apart(express_tokens: int) -> None:
    """A 2-token sentence arrives while a 12-token one decodes: with express it is encoded and decoded
    to its end before the long one's next step, in a cohort of its own; without, it joins."""
    starter, permits = stepped()

    async def main() -> list[list[list[int]]]:
        config = SchedulerConfig(max_batch=8, express_tokens=express_tokens)
        scheduler: Scheduler[list[int]] = Scheduler(starter, config)
        scheduler.start()
        long = asyncio.ensure_future(scheduler.submit("m", [list(range(12))]))
        await until(lambda: starter.cohorts, "the long cohort")
        short = asyncio.ensure_future(scheduler.submit("m", [[5, 6]]))
        await until(lambda: scheduler.depth == 2, "the short sentence")  # while the long one's step 1 waits
        return await finished(scheduler, permits, long, short)

    assert asyncio.run(main()) == [[list(range(11, -1, -1))], [[6, 5]]]
    (_, long_cohort), (_, short_cohort) = starter.cohorts
    if express_tokens:
        assert starter.log[:4] == [id(long_cohort), id(short_cohort), id(short_cohort), id(long_cohort)]
        assert len(long_cohort.src_ids) == 1 and short_cohort.done
    else:
        assert set(starter.log) == {id(long_cohort)} and len(long_cohort.src_ids) == 2  # it joined


def test_a_short_sentence_among_sentences_of_like_length_joins_them() -> None:
    """Going first pays only where lengths differ: 4 tokens beside a 6-token sentence (not twice as
    long) join the running batch, even under an express bound of 4."""
    starter, permits = stepped()

    async def main() -> list[list[list[int]]]:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(max_batch=8, express_tokens=4))
        scheduler.start()
        running = asyncio.ensure_future(scheduler.submit("m", [list(range(6))]))
        await until(lambda: starter.cohorts, "the running cohort")
        newcomer = asyncio.ensure_future(scheduler.submit("m", [[1, 2, 3, 4]]))
        await until(lambda: scheduler.depth == 2, "the newcomer")
        return await finished(scheduler, permits, running, newcomer)

    assert asyncio.run(main()) == [[list(range(5, -1, -1))], [[4, 3, 2, 1]]]
    (_, running_cohort), *_ = starter.cohorts
    assert set(starter.log) == {id(running_cohort)} and len(running_cohort.src_ids) == 2


def test_a_short_sentence_that_fails_to_encode_fails_alone() -> None:
    starter, permits = stepped()
    starter.fail_keys.add("bad")

    async def main() -> tuple[list[list[int]], BaseException | list[list[int]]]:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(express_tokens=4))
        scheduler.start()
        long = asyncio.ensure_future(scheduler.submit("ok", [list(range(12))]))
        await until(lambda: starter.cohorts, "the long cohort")
        bad = asyncio.ensure_future(scheduler.submit("bad", [[1]]))
        await until(lambda: scheduler.depth == 2, "the short sentence")
        for _ in range(20):
            permits.release()
        failed = (await asyncio.gather(bad, return_exceptions=True))[0]
        result = await long
        assert scheduler.healthy and scheduler.depth == 0
        await scheduler.stop()
        return result, failed

    result, failed = asyncio.run(main())
    assert result == [list(range(11, -1, -1))]
    assert isinstance(failed, RuntimeError) and "cannot encode bad" in str(failed)


def test_a_full_queue_refuses_at_once_and_has_room_afterwards() -> None:
    starter = Starter()
    starter.gates["m"] = gate = threading.Event()

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(max_queue=4, retry_after_s=3))
        scheduler.start()
        first = asyncio.ensure_future(scheduler.submit("m", [[1], [2], [3]]))
        await until(lambda: scheduler.depth == 3, "the first request")
        with pytest.raises(Overloaded) as refused:
            await scheduler.submit("m", [[4], [5]])
        assert refused.value.retry_after == 3
        assert "limit 4" in refused.value.message
        gate.set()
        await first
        assert await scheduler.submit("m", [[4], [5]]) == [[4], [5]]
        assert scheduler.depth == 0
        await scheduler.stop()

    asyncio.run(main())


def test_calls_share_the_queue_and_count_in_its_depth() -> None:
    starter = Starter()
    release = threading.Event()

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(max_queue=2))
        scheduler.start()
        blocked = asyncio.ensure_future(scheduler.call(release.wait, WAIT))
        await until(lambda: scheduler.depth == 1, "the call to run")
        queued = asyncio.ensure_future(scheduler.submit("m", [[1]]))
        await until(lambda: scheduler.depth == 2, "the sentence to queue")
        with pytest.raises(Overloaded):
            await scheduler.call(sum, [1, 2])
        release.set()
        assert await blocked is True
        assert await queued == [[1]]
        assert await scheduler.call(sum, [1, 2]) == 3
        await scheduler.stop()

    asyncio.run(main())


def test_calls_queued_together_run_as_one_per_key_and_each_caller_gets_its_answer() -> None:
    batches: list[list[int]] = []

    def tens(items: list[int]) -> list[int]:  # runs on the inference thread
        batches.append(items)
        return [10 * x for x in items]

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(Starter(), SchedulerConfig())
        calls = [scheduler.call_together(tens, 1, "a"), scheduler.call_together(tens, 2, "b")]
        calls += [scheduler.call(sum, [1, 2]), scheduler.call_together(tens, 3, "a")]
        answers = asyncio.gather(*calls)
        await until(lambda: scheduler.depth == 4, "every call to queue")  # queued before the thread starts
        scheduler.start()
        assert await answers == [10, 20, 3, 30]
        assert batches == [[1, 3], [2]]
        assert await scheduler.call_together(tens, 4, "a") == 40  # alone, later
        assert scheduler.depth == 0
        await scheduler.stop()

    asyncio.run(main())


def test_calls_run_together_fail_together_leave_out_a_caller_gone_and_serving_goes_on() -> None:
    seen: list[list[int]] = []

    def broken(items: list[int]) -> list[int]:
        seen.append(items)
        raise RuntimeError("scoring broke")

    def none(items: list[int]) -> list[int]:
        return []

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(Starter(), SchedulerConfig())
        failing = [asyncio.ensure_future(scheduler.call_together(broken, x, "k")) for x in (1, 2, 3)]
        await until(lambda: scheduler.depth == 3, "the calls to queue")
        failing[1].cancel()  # its caller left before the thread ran it
        await until(failing[1].done, "the cancel")
        scheduler.start()
        for call in (failing[0], failing[2]):
            with pytest.raises(RuntimeError, match="scoring broke"):
                await call
        assert seen == [[1, 3]]
        with pytest.raises(RuntimeError, match="1 calls run together gave 0 answers"):
            await scheduler.call_together(none, 1, "k")
        assert await scheduler.call(sum, [1, 2]) == 3
        assert await scheduler.submit("m", [[1, 2]]) == [[2, 1]]
        await until(lambda: scheduler.depth == 0, "the depth to settle")
        await scheduler.stop()

    asyncio.run(main())


def test_a_caller_that_leaves_has_its_rows_dropped_before_the_next_step() -> None:
    starter = Starter()
    starter.gates["m"] = gate = threading.Event()

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig())
        scheduler.start()
        leaving = asyncio.ensure_future(scheduler.submit("m", [list(range(50)), [7] * 40]))
        await until(lambda: starter.cohorts, "the cohort")
        leaving.cancel()  # a deadline or a disconnect
        await asyncio.gather(leaving, return_exceptions=True)
        gate.set()
        cohort = starter.cohorts[0][1]
        await until(lambda: cohort.done, "the cohort to end")
        assert cohort.dropped == {0, 1}
        assert cohort.steps == 1  # the step that was running when the caller left; none after
        await until(lambda: scheduler.depth == 0, "the queue to empty")
        await scheduler.stop()

    asyncio.run(main())


def test_a_failing_batch_fails_its_requests_only_and_serving_goes_on() -> None:
    starter = Starter()
    starter.fail_keys.add("bad")
    hook_calls: list[int] = []

    def raising_hook(size: int) -> None:
        hook_calls.append(size)
        raise ValueError("a metrics hook that raises")

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(starter, SchedulerConfig(), on_batch=raising_hook)
        scheduler.start()
        ok, bad = await asyncio.gather(
            scheduler.submit("ok", [[1]]), scheduler.submit("bad", [[2]]), return_exceptions=True
        )
        assert ok == [[1]]
        assert isinstance(bad, RuntimeError) and "cannot encode bad" in str(bad)
        assert await scheduler.submit("ok", [[3]]) == [[3]]
        assert scheduler.healthy and scheduler.depth == 0
        await scheduler.stop()

    asyncio.run(main())
    assert hook_calls  # it raised every time, and every batch was still served


def test_a_failing_step_fails_that_cohort_only() -> None:
    class Breaks(Scripted):
        def step(self) -> list[tuple[int, list[int]]]:
            if self.src_ids[0][0] == 666:
                raise RuntimeError("step failed")
            return super().step()

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(lambda key, ids: Breaks(ids), SchedulerConfig(max_batch=1))
        scheduler.start()
        results = await asyncio.gather(
            scheduler.submit("m", [[1, 2, 3]]), scheduler.submit("m", [[666]]), return_exceptions=True
        )
        assert results[0] == [[3, 2, 1]]
        assert isinstance(results[1], RuntimeError)
        assert scheduler.healthy
        await scheduler.stop()

    asyncio.run(main())


def test_a_broken_loop_fails_everything_turns_unhealthy_and_says_so() -> None:
    class Unknowable(Scripted):
        @property
        def done(self) -> bool:
            raise RuntimeError("the loop's own bookkeeping broke")

    fatal: list[BaseException] = []

    async def main() -> None:
        scheduler: Scheduler[list[int]] = Scheduler(
            lambda key, ids: Unknowable(ids), SchedulerConfig(), on_fatal=fatal.append
        )
        scheduler.start()
        with pytest.raises(RuntimeError, match="bookkeeping"):
            await scheduler.submit("m", [[1, 2]])
        await until(lambda: not scheduler.healthy, "the scheduler to turn unhealthy")
        with pytest.raises(NotReady):
            await scheduler.submit("m", [[1]])
        await scheduler.stop()

    asyncio.run(main())
    assert len(fatal) == 1
