"""`TimedCommunicator`: a communicator that measures how long its rank computes.

Load balancing by time (`DomainConfig(balance_weight="time")`) needs each rank's own work,
not its wall time per step: the forward interleaves a halo exchange with every
message-passing layer, so a lightly loaded rank spends the difference waiting for its
neighbours and every rank's step lasts about as long. The wrapper adds up the wall time of
every call into the communicator (sending, receiving, waiting), and `computing()` times a
section less what its communication took.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, NoReturn

import torch

from nvdd_plugins.comm.base import Communicator, ReduceOp

__all__ = ["TimedCommunicator", "computing"]


def _synchronize(device: torch.device) -> None:
    """Wait for queued kernels on a CUDA `device`, so host clocks see their time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TimedCommunicator(Communicator):
    """Delegates to `inner`, adding the seconds spent in its calls to `communicating`.

    On CUDA each call first waits for queued kernels (so that kernels launched before an
    exchange count as computing, not as communicating): time weighting costs one device
    synchronisation per exchange.

    Attributes:
        communicating: seconds spent in communication calls so far.
        computed: seconds of `computing` sections less their communication, since the last
            `take_computed`.
    """

    def __init__(self, inner: Communicator) -> None:
        self.inner = inner
        self.rank, self.size = inner.rank, inner.size
        self.communicating = 0.0
        self.computed = 0.0

    @contextmanager
    def _clock(self, device: torch.device) -> Iterator[None]:
        _synchronize(device)
        start = time.perf_counter()
        try:
            yield
        finally:
            _synchronize(device)
            self.communicating += time.perf_counter() - start

    def exchange(
        self,
        sends: Mapping[int, torch.Tensor],
        recv_counts: Mapping[int, int],
        template: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        """`Communicator.exchange`, timed."""
        with self._clock(template.device):
            return self.inner.exchange(sends, recv_counts, template)

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """`Communicator.all_reduce`, timed."""
        with self._clock(tensor.device):
            return self.inner.all_reduce(tensor, op)

    def all_to_all(
        self,
        sends: Sequence[torch.Tensor],
        recv_counts: Sequence[int],
        template: torch.Tensor,
    ) -> list[torch.Tensor]:
        """`Communicator.all_to_all`, timed."""
        with self._clock(template.device):
            return self.inner.all_to_all(sends, recv_counts, template)

    def all_to_all_single(
        self, x: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int]
    ) -> torch.Tensor:
        """`Communicator.all_to_all_single`, timed."""
        with self._clock(x.device):
            return self.inner.all_to_all_single(x, send_counts, recv_counts)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """`Communicator.all_gather`, timed."""
        with self._clock(tensor.device):
            return self.inner.all_gather(tensor)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """`Communicator.broadcast_object`, timed."""
        with self._clock(torch.device("cpu")):
            return self.inner.broadcast_object(obj, src)

    def barrier(self) -> None:
        """`Communicator.barrier`, timed."""
        with self._clock(torch.device("cpu")):
            self.inner.barrier()

    def end_job(self, message: str) -> NoReturn:
        """`Communicator.end_job` of the wrapped communicator."""
        self.inner.end_job(message)

    @contextmanager
    def computing(self, device: torch.device) -> Iterator[None]:
        """Add the wall time of the section on `device`, less its communication, to
        `computed`."""
        _synchronize(device)
        start, communicated = time.perf_counter(), self.communicating
        try:
            yield
        finally:
            _synchronize(device)
            elapsed = time.perf_counter() - start
            self.computed += max(elapsed - (self.communicating - communicated), 0.0)

    def take_computed(self) -> float:
        """`computed`, which starts again from zero."""
        seconds, self.computed = self.computed, 0.0
        return seconds

    def __repr__(self) -> str:
        return f"TimedCommunicator({self.inner!r})"


def computing(comm: Communicator, device: torch.device) -> AbstractContextManager[None]:
    """`comm.computing(device)` for a `TimedCommunicator`; otherwise a section that measures
    nothing."""
    return comm.computing(device) if isinstance(comm, TimedCommunicator) else nullcontext()
