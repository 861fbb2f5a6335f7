"""`DistributedManager`: process group and mesh lifecycle for torchrun, SLURM and mpirun."""

from __future__ import annotations

import atexit
import datetime
import gc
import logging
import os
import socket
import sys

import torch
import torch.distributed as dist

from nvdd_plugins.comm import (
    Communicator,
    LaunchInfo,
    LocalCommunicator,
    TorchDistCommunicator,
    detect_launch,
    end_job_on_exception,
    set_default_communicator,
    slurm_first_host,
)
from nvdd_plugins.parallel.failures import end_job_after_failure, forget_failures

__all__ = ["DistributedManager"]

logger = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DistributedManager:
    """Initialise and tear down the process group; exposes `rank`, `world_size`, `device`
    and `mesh` (the world `Communicator`).

    Call `DistributedManager.initialize()` once at launcher scope and
    `DistributedManager.cleanup()` at the end. Works with torchrun (env://), SLURM
    (set MASTER_ADDR/MASTER_PORT or run on one node) and mpirun (the port is broadcast with
    mpi4py). On a single process without a launcher it does nothing and `mesh` is one rank.
    """

    _current: DistributedManager | None = None

    def __init__(self, info: LaunchInfo, device: torch.device, mesh: Communicator) -> None:
        self.info = info
        self.device = device
        self.mesh = mesh

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self.info.rank

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self.info.world_size

    @property
    def local_rank(self) -> int:
        """Rank on this node (selects the GPU)."""
        return self.info.local_rank

    @classmethod
    def initialize(
        cls,
        backend: str | None = None,
        timeout_s: float = 600.0,
        device: str | None = None,
    ) -> DistributedManager:
        """Start the process group (gloo on CPU, NCCL with one GPU per local rank).

        Args:
            backend: "gloo" or "nccl"; default NCCL when CUDA is available, else gloo.
            timeout_s: collective timeout in seconds.
            device: "cpu" or "cuda" to override the device choice.
        """
        if cls._current is not None:
            return cls._current
        forget_failures()
        info = detect_launch()
        use_cuda = (device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
        torch_device = torch.device("cuda", info.local_rank) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(torch_device)
        if info.world_size == 1 and info.launcher == "none":
            cls._current = cls(info, torch_device, LocalCommunicator())
            set_default_communicator(cls._current.mesh)
            return cls._current
        backend = backend or ("nccl" if use_cuda else "gloo")
        init_method = cls._init_method(info)
        dist.init_process_group(
            backend,
            init_method=init_method,
            rank=info.rank,
            world_size=info.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        # After init_process_group: it wraps the hook it finds (to prefix the rank), and ours
        # must run last, once the traceback is printed.
        end_job_on_exception(info.launcher)
        staging = "cpu" if backend == "gloo" else None
        mesh = TorchDistCommunicator(staging_device=staging)
        cls._current = cls(info, torch_device, mesh)
        set_default_communicator(mesh)
        atexit.unregister(cls._cleanup_at_exit)
        atexit.register(cls._cleanup_at_exit)
        logger.info(
            "rank %d/%d (%s, %s) on %s",
            info.rank,
            info.world_size,
            info.launcher,
            backend,
            torch_device,
        )
        return cls._current

    @staticmethod
    def _init_method(info: LaunchInfo) -> str:
        if info.launcher == "mpirun" and "MASTER_ADDR" not in os.environ:
            from mpi4py import MPI  # only under mpirun

            hosts = MPI.COMM_WORLD.allgather(socket.gethostname())
            address = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
            port = MPI.COMM_WORLD.bcast(_free_port() if info.rank == 0 else None, root=0)
            return f"tcp://{address}:{port}"
        if "MASTER_ADDR" not in os.environ:
            nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
            address = slurm_first_host(nodes) if info.launcher == "slurm" and nodes else None
            os.environ["MASTER_ADDR"] = address or "127.0.0.1"
        os.environ.setdefault("MASTER_PORT", "29500")
        return "env://"

    @classmethod
    def is_initialized(cls) -> bool:
        """Whether `initialize` ran and `cleanup` did not."""
        return cls._current is not None

    @classmethod
    def cleanup(cls) -> None:
        """Destroy the process group (if any) and forget the mesh.

        On a normal exit all ranks first meet at a barrier: tearing gloo down while a peer
        still talks to it can abort that peer. While an exception propagates the group is
        left alone (destroying an NCCL group with a peer gone can block): the exception
        hook ends the process and the launcher ends its peers. After an exception left a
        `DomainParallel` call on this rank only (caught by the script), its peers may still
        wait in that call's collective: cleanup then ends the job, as the exception hook would.
        """
        propagating = sys.exc_info()[0] is not None
        if cls._current is not None and not propagating:
            end_job_after_failure(cls._current.mesh, "DistributedManager.cleanup()")
        if dist.is_available() and dist.is_initialized() and not propagating:
            # the mesh's barrier is watched: a peer that never arrives ends the job
            (cls._current.mesh if cls._current is not None else dist).barrier()
            dist.destroy_process_group()
            # gloo's worker threads may still hold the last references to exchanged tensors;
            # releasing them now, while the interpreter is alive, avoids an abort at exit.
            gc.collect()
        set_default_communicator(None)
        cls._current = None

    @classmethod
    def _cleanup_at_exit(cls) -> None:
        """`cleanup` for a script that ends without it: a rank whose interpreter tears the
        process group and its store down at exit while a peer still holds them aborted
        ("terminate called without an active exception", 2 of 16 runs with the peer ending
        0.5 s later); so the ranks meet at cleanup's barrier first here too."""
        if cls._current is not None and dist.is_available() and dist.is_initialized():
            cls.cleanup()
