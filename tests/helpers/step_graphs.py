"""A `StepGraph` that records nothing: `replay()` runs the step's Python again, as a capture
would see it (`without_host_checks`), so the replay bookkeeping of `GraphedSteps` (static
buffers, masked steps, the stale flag, the kept count, hook windows) runs on the CPU, and a
step that leans on a host check a capture skips fails there too."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import without_host_checks


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
        """Run the kept step without host checks (as its capture ran)."""
        assert self.body is not None
        self.replays += 1
        with without_host_checks():
            self.body()

    def read_later(self, value: torch.Tensor) -> Callable[[], int]:
        """`value` now."""
        now = int(value)
        return lambda: now

    def clock(self) -> float:
        """`time.perf_counter()` (nothing is queued on the CPU)."""
        return time.perf_counter()


def stepped_then_run(make: Callable[[], tuple[Batch, Any]], steps: int) -> list[tuple[Batch, Any]]:
    """Two trajectories of `steps` steps, each from a new `make()` = (batch, driver), where a
    driver is a `DomainParallel` or an integrator: eager `step()`s (never replayed), then one
    `run()` (replayed where it can be); their [(batch, driver), (batch, driver)]."""
    runs = []
    for replayed in (False, True):
        batch, driver = make()
        if replayed:
            driver.run(batch, steps)
        else:
            for _ in range(steps):
                driver.step(batch)
        runs.append((batch, driver))
    return runs
