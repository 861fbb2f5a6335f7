"""Communicator over `torch.distributed` (gloo on CPU, NCCL on GPU)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from nvdd_plugins.comm.base import Communicator, ReduceOp
from nvdd_plugins.comm.launch import abort_job, detect_launch
from nvdd_plugins.comm.watchdog import torch_watch

__all__ = ["TorchDistCommunicator"]

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class TorchDistCommunicator(Communicator):
    """A process group of an initialised `torch.distributed`.

    Args:
        group: the process group (None: the world).
        staging_device: where tensors travel. Default: CPU for gloo (gloo cannot move CUDA
            tensors point-to-point), this process's CUDA device for NCCL (NCCL moves only
            CUDA tensors, and plans and counts live on the CPU).
    """

    def __init__(self, group: Any = None, staging_device: torch.device | str | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialised: call DistributedManager.initialize() "
                "or torch.distributed.init_process_group first"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = dist.get_backend(group)
        if staging_device is None and self.backend == "gloo":
            staging_device = "cpu"
        if staging_device is None and self.backend == "nccl":
            staging_device = torch.device("cuda", torch.cuda.current_device())
        self.staging_device = torch.device(staging_device) if staging_device else None
        self._watch = torch_watch(group, self.rank, self.size)

    def _global(self, peer: int) -> int:
        return peer if self.group is None else dist.get_global_rank(self.group, peer)

    def _stage(self, tensor: torch.Tensor) -> torch.Tensor:
        target = self.staging_device or tensor.device
        return tensor.detach().to(target).contiguous()

    def exchange(
        self,
        sends: Mapping[int, torch.Tensor],
        recv_counts: Mapping[int, int],
        template: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        """Neighbour-only exchange with `batch_isend_irecv`."""
        device = self.staging_device or template.device
        ops = []
        buffers: dict[int, torch.Tensor] = {}
        staged = {p: self._stage(t) for p, t in sends.items() if t.shape[0] > 0}
        for peer, tensor in staged.items():
            ops.append(dist.P2POp(dist.isend, tensor, self._global(peer), self.group))
        for peer, count in recv_counts.items():
            buffers[peer] = torch.empty(
                (count, *template.shape[1:]), dtype=template.dtype, device=device
            )
            if count > 0:
                ops.append(dist.P2POp(dist.irecv, buffers[peer], self._global(peer), self.group))
        if ops:
            with self._watch.call("exchange"):
                for request in dist.batch_isend_irecv(ops):
                    request.wait()
        return {p: b.to(template.device) for p, b in buffers.items()}

    def all_to_all(
        self,
        sends: Sequence[torch.Tensor],
        recv_counts: Sequence[int],
        template: torch.Tensor,
    ) -> list[torch.Tensor]:
        """`torch.distributed.all_to_all_single` with uneven splits of the rows."""
        if len(sends) != self.size or len(recv_counts) != self.size:
            raise ValueError(f"need one tensor and one count per rank ({self.size})")
        device = self.staging_device or template.device
        staged = torch.cat([self._stage(t.reshape(-1, *template.shape[1:])) for t in sends])
        received = torch.empty(
            (sum(recv_counts), *template.shape[1:]), dtype=template.dtype, device=device
        )
        with self._watch.call("all_to_all"):
            dist.all_to_all_single(
                received,
                staged,
                output_split_sizes=list(recv_counts),
                input_split_sizes=[int(t.shape[0]) for t in sends],
                group=self.group,
            )
        return list(received.to(template.device).split(list(recv_counts)))

    def all_to_all_single(
        self, x: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int]
    ) -> torch.Tensor:
        """`torch.distributed.all_to_all_single` from `x` (copied only to be staged) into
        one new tensor."""
        if len(send_counts) != self.size or len(recv_counts) != self.size:
            raise ValueError(f"need one send and one receive count per rank ({self.size})")
        staged = self._stage(x)
        received = staged.new_empty((sum(recv_counts), *x.shape[1:]))
        with self._watch.call("all_to_all"):
            dist.all_to_all_single(
                received,
                staged,
                output_split_sizes=list(recv_counts),
                input_split_sizes=list(send_counts),
                group=self.group,
            )
        return received.to(x.device)

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """`torch.distributed.all_reduce` on a copy."""
        staged = self._stage(tensor).clone()
        with self._watch.call("all_reduce"):
            dist.all_reduce(staged, op=_OPS[op], group=self.group)
        return staged.to(tensor.device)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Gather tensors of differing leading size (padded to the largest on the wire)."""
        staged = self._stage(tensor)
        size = torch.tensor([staged.shape[0]], device=staged.device)
        sizes = [torch.zeros_like(size) for _ in range(self.size)]
        with self._watch.call("all_gather"):
            dist.all_gather(sizes, size, group=self.group)
            longest = int(max(int(s) for s in sizes))
            padded = staged.new_zeros((longest, *staged.shape[1:]))
            padded[: staged.shape[0]] = staged
            parts = [torch.empty_like(padded) for _ in range(self.size)]
            dist.all_gather(parts, padded, group=self.group)
        return [p[: int(s)].to(tensor.device) for p, s in zip(parts, sizes, strict=True)]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """`broadcast_object_list` of one object."""
        box = [obj]
        with self._watch.call("broadcast_object"):
            dist.broadcast_object_list(box, src=self._global(src), group=self.group)
        return box[0]

    def barrier(self) -> None:
        """`torch.distributed.barrier`."""
        with self._watch.call("barrier"):
            dist.barrier(group=self.group)

    def end_job(self, message: str) -> NoReturn:
        """Print `message` and end the job: MPI aborts every rank under mpirun, otherwise
        this process exits and its launcher stops the others."""
        sys.stderr.write(f"[rank{dist.get_rank()}]: {message}\n")
        abort_job(detect_launch().launcher == "mpirun")
