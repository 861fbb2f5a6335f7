"""A recorded MD step: the `StepGraph` protocol `GraphedSteps` replays, and its CUDA graph."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import torch

__all__ = ["CudaStepGraph", "StepGraph"]


class StepGraph(Protocol):
    """A recorded step: `warm_up(fn)`, `capture(body)` once, then `replay()` runs it again."""

    def warm_up(self, fn: Callable[[], None]) -> None:
        """Run `fn` once before capturing."""

    def capture(self, body: Callable[[], None]) -> None:
        """Record `body`."""

    def replay(self) -> None:
        """Run the recorded step."""

    def read_later(self, value: torch.Tensor) -> Callable[[], int]:
        """A function that returns `value` (a device int) as it is now in stream order."""

    def clock(self) -> float:
        """Seconds (of a monotonic clock) once the work queued so far has finished."""


class CudaStepGraph:
    """`StepGraph` on a `torch.cuda.CUDAGraph` for a step on `device`: warm-up and capture
    on a side stream."""

    def __init__(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(
                f"cuda_graphs=True needs the model and atoms on a CUDA device, not {device}: "
                'pass cuda_graphs="auto" (off on the CPU) or False'
            )
        self.graph = torch.cuda.CUDAGraph()
        # one side stream for every warm-up of this graph: a later warm-up reuses the blocks
        # the caching allocator keeps for that stream
        self.side = torch.cuda.Stream(device)

    def warm_up(self, fn: Callable[[], None]) -> None:
        """Run `fn` on a side stream (lazy initialisations, kernel libraries tuning
        themselves per shape happen outside the capture)."""
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            fn()
        torch.cuda.current_stream().wait_stream(self.side)

    def capture(self, body: Callable[[], None]) -> None:
        """Capture `body` (on a side stream, as `torch.cuda.graph` does)."""
        with torch.cuda.graph(self.graph):
            body()

    def replay(self) -> None:
        """Launch the graph."""
        self.graph.replay()

    def read_later(self, value: torch.Tensor) -> Callable[[], int]:
        """Copy `value` to pinned host memory behind the queued work; the function waits
        for that copy only."""
        host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
        host.copy_(value, non_blocking=True)
        done = torch.cuda.Event()
        done.record()

        def result() -> int:
            done.synchronize()
            return int(host)

        return result

    def clock(self) -> float:
        """`time.perf_counter()` after the device finished its queued work."""
        torch.cuda.synchronize()
        return time.perf_counter()
