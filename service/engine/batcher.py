"""Dynamic batching: texts from concurrent requests are decoded together.

Requests put their texts on one bounded queue. A worker takes up to `max_batch` texts that share
a model and search options, waiting at most `max_delay` after the oldest arrived for company,
sorts them by length to cut padding, decodes them in one batch on a worker thread, and routes
each result back to its request in order. A full queue refuses new texts at once (Overloaded).
With batching off, each request is decoded alone (its texts still form one batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from service.engine.errors import Overloaded

ResultT = TypeVar("ResultT")
T = TypeVar("T")
RunBatch = Callable[[Hashable, list[list[int]]], list[ResultT]]


@dataclass
class _Job(Generic[ResultT]):
    key: Hashable  # texts with the same key may share a batch (model, search options)
    src_ids: list[int]
    request: int
    enqueued: float
    future: asyncio.Future[ResultT] = field(repr=False)


@dataclass(frozen=True)
class BatcherConfig:
    batching: bool = True
    max_batch: int = 32
    max_delay_s: float = 0.005
    max_queue: int = 256
    retry_after_s: int = 1


class Batcher(Generic[ResultT]):
    def __init__(
        self,
        run_batch: RunBatch[ResultT],
        config: BatcherConfig,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        self.run_batch, self.config, self.on_batch = run_batch, config, on_batch
        self.queue: deque[_Job[ResultT]] = deque()
        self._wakeup = asyncio.Event()
        self._requests = itertools.count()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        self._task: asyncio.Task[None] | None = None
        self.in_flight = 0

    @property
    def depth(self) -> int:
        """Texts waiting or being decoded."""
        return len(self.queue) + self.in_flight

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def run_in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """Run other inference (e.g. introspection) on the inference thread, between batches."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def submit(self, key: Hashable, src_ids: list[list[int]]) -> list[ResultT]:
        """Queue the texts of one request; results come back in the same order."""
        if self.depth + len(src_ids) > self.config.max_queue:
            raise Overloaded(
                f"the queue is full ({self.depth} texts waiting, limit {self.config.max_queue}); retry shortly",
                retry_after=self.config.retry_after_s,
            )
        loop = asyncio.get_running_loop()
        request = next(self._requests)
        jobs = [_Job(key, ids, request, loop.time(), loop.create_future()) for ids in src_ids]
        self.queue.extend(jobs)
        self._wakeup.set()
        return list(await asyncio.gather(*(job.future for job in jobs)))

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self.config.batching and len(self.queue) < self.config.max_batch:
                wait = self.queue[0].enqueued + self.config.max_delay_s - loop.time()
                if wait > 0:
                    self._wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), wait)
                    continue
            await self._run(self._take())

    def _take(self) -> list[_Job[ResultT]]:
        """The oldest job and the queued jobs that may share its batch."""
        first = self.queue[0]
        if self.config.batching:
            fits = [j for j in self.queue if j.key == first.key][: self.config.max_batch]
        else:
            fits = [j for j in self.queue if j.request == first.request]
        taken = {id(j) for j in fits}
        self.queue = deque(j for j in self.queue if id(j) not in taken)
        return fits

    async def _run(self, jobs: list[_Job[ResultT]]) -> None:
        jobs = [j for j in jobs if not j.future.done()]  # a cancelled request's texts are skipped
        if not jobs:
            return
        jobs.sort(key=lambda j: len(j.src_ids))
        self.in_flight = len(jobs)
        self.on_batch(len(jobs))
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._executor, self.run_batch, jobs[0].key, [j.src_ids for j in jobs])
        except Exception as exc:  # the request handlers turn it into an error answer
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(exc)
        else:
            for job, result in zip(jobs, results, strict=True):
                if not job.future.done():
                    job.future.set_result(result)
        finally:
            self.in_flight = 0
