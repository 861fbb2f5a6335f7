"""A `StepGraph` that records nothing: `replay()` runs the step's Python again, so the replay
bookkeeping of `GraphedSteps` (static buffers, masked steps, the stale flag, the kept
count, hook windows) runs on the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


class EagerStepGraph:
    """`StepGraph` whose replays call the captured step; counts them."""

    def __init__(self, device: torch.device) -> None:
        self.body: Callable[[], None] | None = None
        self.replays = 0

    def warm_up(self, fn: Callable[[], None]) -> None:
        """Run `fn`."""
        fn()

    def capture(self, body: Callable[[], None]) -> None:
        """Keep `body` (a CUDA capture runs nothing)."""
        self.body = body

    def replay(self) -> None:
        """Run the kept step."""
        assert self.body is not None
        self.replays += 1
        self.body()

    def read_later(self, value: torch.Tensor) -> Callable[[], int]:
        """`value` now."""
        now = int(value)
        return lambda: now

    def clock(self) -> float:
        """`time.perf_counter()` (nothing is queued on the CPU)."""
        return time.perf_counter()
