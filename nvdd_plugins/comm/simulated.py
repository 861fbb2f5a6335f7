"""An in-process mesh of N virtual ranks (one thread each), for unit tests and validation.

Each virtual rank runs the same function in its own thread; messages pass through queues
and collectives meet at a barrier. A failure on one rank aborts the barrier, so the others
fail fast instead of hanging. Autograd normally runs every CUDA backward of a device on one
shared worker thread, where one virtual rank's backward exchange would wait for a peer's
backward queued behind it; `run_simulated` therefore runs each rank's backward on the rank's
own thread, and only its meshes exchange CUDA tensors.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

import torch

from nvdd_plugins.comm.base import Communicator, ReduceOp

__all__ = ["CountingCommunicator", "SimulatedCommunicator", "SimulatedMesh", "run_simulated"]

T = TypeVar("T")
_POLL_S = 0.02  # how often a rank waiting for a message checks whether another rank failed
_REDUCERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum": lambda t: t.sum(0),
    "max": lambda t: t.max(0).values,
    "min": lambda t: t.min(0).values,
}


class SimulatedMesh:
    """Shared state of `size` virtual ranks: per-pair FIFO mailboxes and a barrier."""

    def __init__(
        self, size: int, timeout: float = 60.0, backward_on_rank_threads: bool = False
    ) -> None:
        if size < 1:
            raise ValueError("a mesh needs at least one rank")
        self.size = size
        self.timeout = timeout
        self.backward_on_rank_threads = backward_on_rank_threads
        self._mail = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
        self._barrier = threading.Barrier(size, timeout=timeout)
        self._slots: list[Any] = [None] * size
        self._failed = threading.Event()

    def communicator(self, rank: int) -> SimulatedCommunicator:
        """The communicator of virtual rank `rank`."""
        return SimulatedCommunicator(self, rank)

    def abort(self) -> None:
        """Make every rank waiting in a collective or for a message raise instead of hang."""
        self._failed.set()
        self._barrier.abort()

    def take(self, source: int, destination: int) -> Any:
        """The next message from `source` to `destination`; raises at once when the mesh
        was aborted, and after `timeout` seconds without a message."""
        mailbox = self._mail[(source, destination)]
        waited = 0.0
        while waited < self.timeout:
            if self._failed.is_set():
                raise RuntimeError(f"rank {destination}: another rank failed")
            try:
                return mailbox.get(timeout=_POLL_S)
            except queue.Empty:
                waited += _POLL_S
        self.abort()
        raise TimeoutError(f"rank {destination}: no message from rank {source} in {self.timeout} s")


class SimulatedCommunicator(Communicator):
    """One virtual rank of a `SimulatedMesh`."""

    def __init__(self, mesh: SimulatedMesh, rank: int) -> None:
        self.mesh = mesh
        self.rank = rank
        self.size = mesh.size

    def end_job(self, message: str) -> NoReturn:
        """Abort the mesh (every other rank's collective raises) and raise `message`."""
        self.mesh.abort()
        raise RuntimeError(message)

    def _post(self, peer: int, payload: Any) -> None:
        self.mesh._mail[(self.rank, peer)].put(payload)

    def exchange(
        self,
        sends: Mapping[int, torch.Tensor],
        recv_counts: Mapping[int, int],
        template: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        """Point-to-point exchange through the mesh's mailboxes."""
        if template.is_cuda and self.size > 1 and not self.mesh.backward_on_rank_threads:
            raise RuntimeError(
                "simulated ranks cannot exchange CUDA tensors outside run_simulated: autograd "
                "runs every backward on a device in one thread, so a backward exchange would "
                "deadlock. Use run_simulated, or one process per rank (torchrun, mpirun)"
            )
        for peer, tensor in sends.items():
            if tensor.shape[0] > 0:
                self._post(peer, tensor.detach().clone())
        received = {}
        for peer, count in recv_counts.items():
            if count == 0:
                received[peer] = template.new_empty((0, *template.shape[1:]))
                continue
            tensor = self.mesh.take(peer, self.rank)
            if tensor.shape[0] != count:
                raise RuntimeError(
                    f"rank {self.rank}: expected {count} rows from rank {peer}, got "
                    f"{tensor.shape[0]}"
                )
            # a real communicator receives bytes into a buffer shaped like `template`
            if (tensor.dtype, tensor.shape[1:]) != (template.dtype, template.shape[1:]):
                raise RuntimeError(
                    f"rank {self.rank}: rank {peer} sent rows of {tensor.dtype} "
                    f"{tuple(tensor.shape[1:])}, this rank receives "
                    f"{template.dtype} {tuple(template.shape[1:])}"
                )
            received[peer] = tensor.to(device=template.device)
        return received

    def _gather_slots(self, value: Any) -> list[Any]:
        self.mesh._slots[self.rank] = value
        self._wait()
        values = list(self.mesh._slots)
        self._wait()
        return values

    def _wait(self) -> None:
        try:
            self.mesh._barrier.wait()
        except threading.BrokenBarrierError:
            raise RuntimeError(f"rank {self.rank}: another rank failed") from None

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """Reduction over the virtual ranks."""
        if self.size == 1:
            return tensor.detach().clone()
        values = self._gather_slots(tensor.detach().clone())
        layouts = {(v.dtype, tuple(v.shape)) for v in values}
        if len(layouts) > 1:  # MPI would truncate or misread, gloo would hang
            given = ", ".join(f"rank {q}: {v.dtype} {tuple(v.shape)}" for q, v in enumerate(values))
            raise RuntimeError(f"all_reduce of different tensors on the ranks ({given})")
        return _REDUCERS[op](torch.stack([v.to(tensor.device) for v in values]))

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every virtual rank's tensor."""
        return [v.to(tensor.device) for v in self._gather_slots(tensor.detach().clone())]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """`obj` from rank `src`."""
        return self._gather_slots(obj)[src]

    def barrier(self) -> None:
        """Wait for every virtual rank."""
        self._wait()


class CountingCommunicator(SimulatedCommunicator):
    """A virtual rank that counts its halo exchanges (`exchanges`; reset it at will): how
    many a model's step makes."""

    def __init__(self, comm: SimulatedCommunicator) -> None:
        super().__init__(comm.mesh, comm.rank)
        self.exchanges = 0

    def exchange(self, *args: Any, **kwargs: Any) -> Any:
        """`SimulatedCommunicator.exchange`, counted."""
        self.exchanges += 1
        return super().exchange(*args, **kwargs)


def _where_waiting(threads: dict[int, threading.Thread]) -> str:
    """The innermost frames of each still-running virtual rank (where it hangs)."""
    frames = sys._current_frames()
    lines = []
    for rank, thread in threads.items():
        frame = frames.get(thread.ident or -1)
        stack = traceback.format_stack(frame)[-4:] if frame is not None else []
        lines.append(f"rank {rank} waits in:\n" + "".join(stack))
    return "\n".join(lines)


def run_simulated(
    world_size: int, fn: Callable[[SimulatedCommunicator], T], timeout: float = 120.0
) -> list[T]:
    """Run `fn(comm)` on `world_size` virtual ranks; return each rank's result.

    Each rank's autograd backward runs on its own thread (CUDA too). The first exception
    raised on any rank is re-raised here, naming that rank.
    """
    mesh = SimulatedMesh(world_size, timeout=timeout, backward_on_rank_threads=True)
    results: list[Any] = [None] * world_size
    errors: list[tuple[int, BaseException]] = []

    def worker(rank: int) -> None:
        try:
            with torch.autograd.set_multithreading_enabled(False):
                results[rank] = fn(mesh.communicator(rank))
        except BaseException as err:
            errors.append((rank, err))
            mesh.abort()

    if world_size == 1:
        worker(0)
    else:
        threads = [
            threading.Thread(target=worker, args=(r,), daemon=True) for r in range(world_size)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = {rank: t for rank, t in enumerate(threads) if t.is_alive()}
        if stuck:
            where = _where_waiting(stuck)
            mesh.abort()
            raise TimeoutError(f"simulated ranks did not finish within {timeout} s:\n{where}")
    if errors:
        # The root cause is the first error that is not a consequence of another rank failing.
        primary = next((e for e in errors if "another rank failed" not in str(e[1])), errors[0])
        rank, err = primary
        raise RuntimeError(f"simulated rank {rank} failed: {err!r}") from err
    return results
