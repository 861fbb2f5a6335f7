"""Communicator over an mpi4py communicator (the ASE and LAMMPS paths)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np
import torch

from nvdd_plugins.comm.base import Communicator, ReduceOp
from nvdd_plugins.comm.launch import abort_job
from nvdd_plugins.comm.staging import Staging
from nvdd_plugins.comm.watchdog import mpi_watch

__all__ = ["MPICommunicator"]

_EXCHANGE_TAG = 7171


class MPICommunicator(Communicator):
    """Wraps an `mpi4py.MPI.Comm` (default `MPI.COMM_WORLD`). Tensors travel through host
    memory as numpy arrays; the halo exchange of GPU tensors through pinned host buffers
    kept per peer between calls."""

    def __init__(self, comm: Any = None) -> None:
        from mpi4py import MPI  # imported here: mpi4py initialises MPI on import

        self._mpi = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._staging: dict[torch.device, Staging] = {}
        self._watch = mpi_watch(self.comm, MPI)

    @staticmethod
    def _host(tensor: torch.Tensor) -> np.ndarray:
        return np.ascontiguousarray(tensor.detach().cpu().numpy())

    def exchange(
        self,
        sends: Mapping[int, torch.Tensor],
        recv_counts: Mapping[int, int],
        template: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        """Non-blocking sends and receives with every named peer."""
        staging = self._staging.setdefault(template.device, Staging(template.device))
        # device -> host copies first: they also wait for the stream, so the previous call's
        # host -> device copies out of the receive buffers are done before MPI refills them
        outgoing = {p: staging.to_host(f"send{p}", t) for p, t in sends.items() if t.shape[0] > 0}
        buffers = {
            peer: staging.host_buffer(
                f"recv{peer}", template.dtype, (count, *template.shape[1:])
            ).numpy()
            for peer, count in recv_counts.items()
        }
        requests = [
            self.comm.Irecv(buf, source=peer, tag=_EXCHANGE_TAG)
            for peer, buf in buffers.items()
            if buf.shape[0] > 0
        ]
        requests += [
            self.comm.Isend(arr, dest=peer, tag=_EXCHANGE_TAG) for peer, arr in outgoing.items()
        ]
        with self._watch.call("exchange"):
            self._mpi.Request.Waitall(requests)
        return {p: staging.to_device(f"recv{p}", b) for p, b in buffers.items()}

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """`Allreduce` through host memory."""
        mpi_op = {"sum": self._mpi.SUM, "max": self._mpi.MAX, "min": self._mpi.MIN}[op]
        send = self._host(tensor)
        recv = np.empty_like(send)
        with self._watch.call("all_reduce"):
            self.comm.Allreduce(send, recv, op=mpi_op)
        return torch.from_numpy(recv).to(tensor.device)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """`allgather` of host arrays (any leading sizes)."""
        with self._watch.call("all_gather"):
            parts = self.comm.allgather(self._host(tensor))
        return [torch.from_numpy(np.asarray(p)).to(tensor.device) for p in parts]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """`bcast` of a picklable object."""
        with self._watch.call("broadcast_object"):
            return self.comm.bcast(obj, root=src)

    def barrier(self) -> None:
        """`Barrier`."""
        with self._watch.call("barrier"):
            self.comm.Barrier()

    def end_job(self, message: str) -> NoReturn:
        """Print `message` and abort every rank of MPI's world."""
        sys.stderr.write(f"[rank{self.rank}]: {message}\n")
        abort_job(mpi=True)
