"""Iteration-level scheduling: every kind of inference goes through one bounded queue and one thread.

Requests put sentences (decode jobs) and other inference (calls: forced decoding, self-attention)
on one queue; a full queue refuses at once (Overloaded). An inference thread loops: it runs the
queued calls (those that batch, `call_together`, as one call per kind), starts new cohorts from
queued sentences that share a key (model and search options) as rows free up (all cohorts
together decode at most `max_batch` sentences, in at most `max_cohorts` cohorts), then takes ONE
decoder step of every running cohort in turn.
So a long sentence never holds short ones behind it: a cohort that starts later advances at the
same pace, and each sentence is answered the step it ends, not when its batch ends. A caller that
leaves (deadline, disconnect) has its rows dropped from its cohort before the next step.

Faults stay local: an exception while starting or stepping a cohort fails that cohort's sentences
(the API answers 500 with a request id and logs the traceback) and the thread goes on. If the loop
itself breaks, the scheduler turns unhealthy, fails everything and calls `on_fatal`.

New sentences are encoded as a batch of their own, then join a running cohort of the same model
between two steps (search.Cohort.join: continuous batching), whatever their search options. A
bundle whose decoder takes every row at one position (a cache grown by concatenation, bundles
exported before continuous batching) cannot mix steps: its new sentences start a cohort of
their own, and `max_cohorts` bounds how many step in turn.

A short sentence among long ones goes first (`express_tokens`): it is taken out of the queue at
once, encoded with the other short ones and decoded apart, to its end, before the running batch's
next step. Joining, it would wait for its batch's expensive steps, one per token; apart, its steps
are cheap. Among sentences of like length it joins as the others do: there, going first stalls the
batch for every short one and batching them serves more (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from service.engine.errors import NotReady, Overloaded

log = logging.getLogger("attention_mt.scheduler")
# a sentence goes express only when at most this share of the mean length of the sentences decoding
EXPRESS_SHARE = 0.5
ResultT = TypeVar("ResultT")
T = TypeVar("T")


class Stepper(Protocol[ResultT]):
    """A batch decoded step by step (search.Cohort): what the scheduler needs of it."""

    @property
    def done(self) -> bool: ...

    def step(self) -> list[tuple[int, ResultT]]:
        """One step for every row; (sentence, result) of those that finished."""
        ...

    def drop(self, sentences: set[int]) -> None: ...

    def join(self, other: Any) -> int | None:
        """Take another batch's sentences mid-decode; the number of its first sentence here, or None."""
        ...


StartCohort = Callable[[Hashable, list[list[int]]], Stepper[ResultT]]


@dataclass(frozen=True)
class SchedulerConfig:
    batching: bool = True  # False: a request's sentences are never mixed with another's
    max_batch: int = 32  # sentences in one cohort
    max_cohorts: int = 4  # cohorts decoding at once, one step each in turn
    max_delay_s: float = 0.0  # extra wait for company before a cohort starts
    join_delay_s: float = 0.0  # the same while a batch runs (its steps go on meanwhile)
    beam_join_delay_s: float = 0.0  # the same for beam searches (`wide` keys): each join costs them more
    express_tokens: int = 0  # a sentence this short (and short beside those decoding) goes first (0: never)
    max_queue: int = 256  # sentences and calls waiting or being decoded
    retry_after_s: int = 1


@dataclass(eq=False)
class _Item:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    cancelled: bool = False  # set on the event loop when the caller leaves; read by the thread

    def watch(self) -> None:
        self.future.add_done_callback(self._on_done)

    def _on_done(self, future: asyncio.Future[Any]) -> None:
        self.cancelled = future.cancelled()

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        """Answer the caller from any thread."""
        self.loop.call_soon_threadsafe(_settle, self.future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclass(eq=False)
class _Job(_Item):
    key: Hashable = None  # sentences with the same key may share a cohort
    src_ids: list[int] = field(default_factory=list)
    request: int = 0
    enqueued: float = 0.0


@dataclass(eq=False)
class _Call(_Item):
    fn: Callable[..., Any] = print
    args: tuple[Any, ...] = ()
    together: Hashable = None  # not None: fn takes a list of args[0]; queued calls with one key run as one


_Batch = tuple[Hashable, list[_Job]]  # sentences of one key, to decode together


def _grouped(calls: list[_Call]) -> list[list[_Call]]:
    """Calls in queue order, those to run together (the same `together` key) in one group at the
    place of the first."""
    groups: dict[Hashable, list[_Call]] = {}
    for i, call in enumerate(calls):
        groups.setdefault(i if call.together is None else call.together, []).append(call)
    return list(groups.values())


@dataclass(eq=False)
class _Running(Generic[ResultT]):
    cohort: Stepper[ResultT]
    group: Hashable  # the model: only its sentences may join this batch
    jobs: list[_Job]  # sentence i of the cohort is jobs[i]
    pending: set[int]  # sentences not answered yet


class Scheduler(Generic[ResultT]):
    def __init__(
        self,
        start_cohort: StartCohort[ResultT],
        config: SchedulerConfig,
        on_batch: Callable[[int], None] = lambda size: None,
        on_fatal: Callable[[BaseException], None] = lambda exc: None,
        group: Callable[[Hashable], Hashable] = lambda key: key,
        wide: Callable[[Hashable], bool] = lambda key: False,
    ) -> None:
        """`group(key)`: the batches a key's sentences may join (the model, whatever the search options);
        `wide(key)`: whether they are beam searches, which wait `beam_join_delay_s` for company."""
        self.start_cohort, self.config, self.on_batch, self.on_fatal = start_cohort, config, on_batch, on_fatal
        self.group, self.wide = group, wide
        self._cv = threading.Condition()
        self._queue: deque[_Job | _Call] = deque()
        self._running: list[_Running[ResultT]] = []
        self._in_flight = 0  # sentences in running cohorts, and the call being run
        self._requests = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.healthy = True

    @property
    def depth(self) -> int:
        """Sentences and calls waiting or being decoded."""
        with self._cv:
            return len(self._queue) + self._in_flight

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="inference", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Finish what is queued and running, then end the thread."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    async def submit(self, key: Hashable, src_ids: list[list[int]]) -> list[ResultT]:
        """Queue the sentences of one request; results come back in the same order."""
        loop = asyncio.get_running_loop()
        request, now = next(self._requests), time.monotonic()
        jobs = [
            _Job(loop, loop.create_future(), key=key, src_ids=ids, request=request, enqueued=now) for ids in src_ids
        ]
        self._enqueue(jobs)
        if len(jobs) == 1:  # one sentence: its future itself, without gather's
            return [await jobs[0].future]
        return list(await asyncio.gather(*(job.future for job in jobs)))

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run other inference (introspection) on the inference thread, in queue order, between steps."""
        loop = asyncio.get_running_loop()
        item = _Call(loop, loop.create_future(), fn=fn, args=args)
        self._enqueue([item])
        result: T = await item.future
        return result

    async def call_together(self, fn: Callable[[list[Any]], list[T]], item: Any, key: Hashable) -> T:
        """Like `call`, for work that is cheaper in one batch: the calls with the same `key` that are
        queued when the thread takes calls run as one `fn([item, ...])`, which answers each in order."""
        loop = asyncio.get_running_loop()
        call = _Call(loop, loop.create_future(), fn=fn, args=(item,), together=(fn, key))
        self._enqueue([call])
        result: T = await call.future
        return result

    def _enqueue(self, items: list[_Job] | list[_Call]) -> None:
        with self._cv:
            if not self.healthy or self._stopping:
                raise NotReady("the scheduler is not running")
            depth = len(self._queue) + self._in_flight
            if depth + len(items) > self.config.max_queue:
                raise Overloaded(
                    f"the queue is full ({depth} waiting, limit {self.config.max_queue}); retry shortly",
                    retry_after=self.config.retry_after_s,
                )
            for item in items:
                item.watch()
            self._queue.extend(items)
            self._cv.notify()

    # the inference thread
    def _work(self) -> None:
        try:
            while (work := self._next()) is not None:
                calls, express, cohorts = work
                for group in _grouped(calls):
                    self._run_calls(group)
                for key, jobs in express:
                    self._run_express(key, jobs)
                for key, jobs in cohorts:
                    self._begin(key, jobs)
                self._step_all()
        except BaseException as exc:  # the loop itself broke: nothing can be served any more
            log.critical("the scheduler stopped", exc_info=exc, extra={"event": "scheduler_failed"})
            self._fail_everything(exc)
            self.on_fatal(exc)

    def _next(self) -> tuple[list[_Call], list[_Batch], list[_Batch]] | None:
        """Wait for work: the calls to run, the short sentences to decode first, and the cohorts to
        start now (None: stopped and idle)."""
        with self._cv:
            while True:
                calls = [item for item in self._queue if isinstance(item, _Call)]
                for call in calls:
                    self._queue.remove(call)
                self._in_flight += len(calls)
                express = self._express()
                cohorts, wait = self._admit(time.monotonic())
                if calls or express or cohorts or self._running:
                    return calls, express, cohorts
                if self._stopping and not self._queue:
                    return None
                self._cv.wait(wait)

    def _express(self) -> list[_Batch]:
        """Take the short sentences among long ones out of the queue, in batches by key."""
        if not self.config.express_tokens or not self.config.batching:
            return []
        lengths = [len(run.jobs[i].src_ids) for run in self._running for i in run.pending]
        if not lengths:
            return []  # nothing decodes: a batch starts at once anyway
        bound = min(self.config.express_tokens, EXPRESS_SHARE * sum(lengths) / len(lengths))
        short = [j for j in self._queue if isinstance(j, _Job) and len(j.src_ids) <= bound]
        if not short:
            return []  # no queue rebuilt
        groups: dict[Hashable, list[_Job]] = {}
        for job in self._take(short):
            groups.setdefault(job.key, []).append(job)
        size = self.config.max_batch
        return [(key, jobs[i : i + size]) for key, jobs in groups.items() for i in range(0, len(jobs), size)]

    def _admit(self, now: float) -> tuple[list[_Batch], float | None]:
        """Take queued sentences into new cohorts while there is room; how long to wait for company."""
        cohorts: list[_Batch] = []
        decoding = sum(len(run.pending) for run in self._running)
        running = {run.group for run in self._running}
        waiting: dict[Hashable, float] = {}  # keys waiting for company, and for how long yet
        while len(self._running) + len(cohorts) < self.config.max_cohorts:
            # the oldest sentence whose key is not waiting: a beam search that waits for company
            # does not hold back the greedy sentences queued after it
            first = next((j for j in self._queue if isinstance(j, _Job) and j.key not in waiting), None)
            if first is None:
                break
            # while a batch they can join runs, waiting costs no idle time: a short wait encodes
            # arrivals together; a model with nothing running starts at once. A beam search waits
            # longer: its join (an encoder call, a merge, a search of its own every step) costs more
            delay = self.config.max_delay_s
            if self.group(first.key) in running:
                joining = self.config.beam_join_delay_s if self.wide(first.key) else self.config.join_delay_s
                delay = max(delay, joining)
            if self.config.batching:
                # rows free up as sentences finish: new ones take their places, so all cohorts
                # together decode at most max_batch sentences (one full batch's worth of work)
                room = self.config.max_batch - decoding - sum(len(c) for _, c in cohorts)
                if room <= 0:
                    break
                members = [j for j in self._queue if isinstance(j, _Job) and j.key == first.key][:room]
                wait = first.enqueued + delay - now
                if len(members) < room and wait > 0 and not self._stopping:
                    waiting[first.key] = wait
                    continue
            else:
                members = [j for j in self._queue if isinstance(j, _Job) and j.request == first.request]
            if live := self._take(members):
                cohorts.append((first.key, live))
        return cohorts, min(waiting.values(), default=None)

    def _take(self, jobs: list[_Job]) -> list[_Job]:
        """Take `jobs` out of the queue; the live ones (their callers still wait), now in flight."""
        taken = {id(j) for j in jobs}
        self._queue = deque(item for item in self._queue if id(item) not in taken)
        live = [j for j in jobs if not j.cancelled]
        self._in_flight += len(live)
        return live

    def _run_calls(self, calls: list[_Call]) -> None:
        """One call, or calls to run together; a fault fails them, not the thread."""
        live = [call for call in calls if not call.cancelled]
        results: list[Any] = [None] * len(live)
        error: Exception | None = None
        try:
            if live and live[0].together is not None:
                answers = list(live[0].fn([call.args[0] for call in live]))
                if len(answers) != len(live):
                    raise RuntimeError(f"{len(live)} calls run together gave {len(answers)} answers")
                results = answers
            elif live:
                results = [live[0].fn(*live[0].args)]
        except Exception as exc:
            log.error("inference call failed", exc_info=exc, extra={"event": "call_failed"})
            error = exc
        self._release(len(calls))  # before the answers: a caller that has its answer is no longer in the depth
        for call, result in zip(live, results, strict=True):
            call.settle(result, error)

    def _started(self, key: Hashable, jobs: list[_Job]) -> Stepper[ResultT] | None:
        """The jobs' cohort, encoded; None when that failed (their callers have the error)."""
        try:
            self.on_batch(len(jobs))
        except Exception as exc:  # a metrics hook must not stop serving
            log.error("the batch hook failed", exc_info=exc, extra={"event": "hook_failed"})
        try:
            return self.start_cohort(key, [j.src_ids for j in jobs])
        except Exception as exc:
            log.error("encoding failed", exc_info=exc, extra={"event": "batch_failed"})
            self._fail(jobs, exc)
            return None

    def _run_express(self, key: Hashable, jobs: list[_Job]) -> None:
        """Decode short sentences apart and to their end, before the running batch steps again."""
        cohort = self._started(key, jobs)
        if cohort is None:
            return
        run = _Running(cohort, self.group(key), jobs, set(range(len(jobs))))
        while run.pending and not run.cohort.done:
            self._step_or_fail(run)
        self._close(run)

    def _begin(self, key: Hashable, jobs: list[_Job]) -> None:
        cohort = self._started(key, jobs)
        if cohort is None:
            return
        group = self.group(key)
        for run in self._running if self.config.batching else []:
            if run.group != group:
                continue
            try:
                first = run.cohort.join(cohort)
            except Exception as exc:  # the running batch is intact only if the merge never happened
                log.error("joining a running batch failed", exc_info=exc, extra={"event": "batch_failed"})
                first = None
            if first is not None:  # its sentences decode in that batch from the next step on
                assert first == len(run.jobs)
                run.jobs += jobs
                run.pending |= set(range(first, first + len(jobs)))
                return
        self._running.append(_Running(cohort, group, jobs, set(range(len(jobs)))))

    def _step_all(self) -> None:
        for run in list(self._running):
            self._step_or_fail(run)
            if run.cohort.done or not run.pending:
                self._running.remove(run)
                self._close(run)

    def _step_or_fail(self, run: _Running[ResultT]) -> None:
        try:
            self._step(run)
        except Exception as exc:
            log.error("decoding failed", exc_info=exc, extra={"event": "batch_failed"})
            self._fail([run.jobs[i] for i in run.pending], exc)
            run.pending.clear()

    def _close(self, run: _Running[ResultT]) -> None:
        if run.pending:  # a search that ends must have answered every sentence
            self._fail([run.jobs[i] for i in run.pending], RuntimeError("a sentence ended with no result"))

    def _step(self, run: _Running[ResultT]) -> None:
        left = {i for i in run.pending if run.jobs[i].cancelled}
        if left:  # their callers are gone (deadline, disconnect): no compute is spent on them
            log.info("dropped %d sentences whose caller left", len(left), extra={"event": "rows_dropped"})
            run.cohort.drop(left)
            run.pending -= left
            self._release(len(left))
        if run.cohort.done:
            return
        for sentence, result in run.cohort.step():
            run.pending.discard(sentence)
            self._release(1)
            run.jobs[sentence].settle(result)

    def _fail(self, jobs: list[_Job], exc: BaseException) -> None:
        self._release(len(jobs))
        for job in jobs:
            job.settle(error=exc)

    def _release(self, n: int) -> None:
        with self._cv:
            self._in_flight -= n

    def _fail_everything(self, exc: BaseException) -> None:
        with self._cv:
            self.healthy = False
            queued, self._queue = list(self._queue), deque()
        for run in self._running:
            queued += [run.jobs[i] for i in run.pending]
        self._running = []
        for item in queued:
            item.settle(error=exc)
