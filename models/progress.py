"""Training progress: a live bar on a terminal, plain log lines otherwise (files, CI)."""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import TextIO

from tqdm import tqdm


class Progress:
    """Reports loss, tokens/s and the epoch's ETA, step by step."""

    def __init__(self, epoch: int, total_steps: int, done_steps: int, log_every: int, stream: TextIO = sys.stderr):
        self.epoch, self.total, self.done, self.log_every = epoch, total_steps, done_steps, log_every
        self.stream = stream
        self.start = time.perf_counter()
        self.tokens = 0
        self.steps_here = 0
        self.bar = (
            tqdm(total=total_steps, initial=done_steps, desc=f"epoch {epoch}", file=stream, dynamic_ncols=True)
            if stream.isatty()
            else None
        )

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)

    def update(self, loss: float, tokens: int, lr: float) -> None:
        self.done += 1
        self.steps_here += 1
        self.tokens += tokens
        elapsed = time.perf_counter() - self.start
        eta = timedelta(seconds=round(elapsed / self.steps_here * (self.total - self.done)))
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{self.tokens_per_second:,.0f}", lr=f"{lr:.2e}")
            self.bar.update(1)
        elif self.done % self.log_every == 0 or self.done == self.total:
            print(
                f"epoch {self.epoch} step {self.done}/{self.total} loss {loss:.3f} "
                f"tok/s {self.tokens_per_second:,.0f} lr {lr:.2e} eta {eta}",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
