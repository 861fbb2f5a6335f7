"""What the launcher says about this process (torchrun, mpirun, SLURM), and ending the whole
job when one rank fails."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

import torch

__all__ = [
    "LaunchInfo",
    "abort_job",
    "detect_launch",
    "end_job_on_exception",
    "local_device",
    "slurm_first_host",
]


@dataclass(frozen=True)
class LaunchInfo:
    """Rank, world size and local rank as the launcher set them, and which launcher."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str


def _env_int(*names: str) -> int | None:
    for name in names:
        if name in os.environ:
            return int(os.environ[name])
    return None


def detect_launch() -> LaunchInfo:
    """Read the launch environment: torchrun, mpirun (Open MPI / MPICH), SLURM, or none."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return LaunchInfo(
            int(os.environ["RANK"]),
            int(os.environ["WORLD_SIZE"]),
            _env_int("LOCAL_RANK") or 0,
            "torchrun",
        )
    mpi_rank = _env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
    mpi_size = _env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    if mpi_rank is not None and mpi_size is not None:
        local = _env_int("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID") or 0
        return LaunchInfo(mpi_rank, mpi_size, local, "mpirun")
    if "SLURM_PROCID" in os.environ and "SLURM_NTASKS" in os.environ:
        return LaunchInfo(
            int(os.environ["SLURM_PROCID"]),
            int(os.environ["SLURM_NTASKS"]),
            _env_int("SLURM_LOCALID") or 0,
            "slurm",
        )
    return LaunchInfo(0, 1, 0, "none")


def local_device(device: torch.device | str) -> torch.device:
    """`device` for this process: CUDA without an index means the GPU the launcher gave this
    rank (`torch.cuda.current_device()`), so each rank's atoms live on its own GPU."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def slurm_first_host(nodelist: str) -> str:
    """The first host of a SLURM node list ("gpu[003-005,9],cpu1" -> "gpu003"): the node of
    task 0 in the default block distribution."""
    first = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if first is None or not first.group(1):
        raise ValueError(f"cannot read the SLURM node list {nodelist!r}")
    prefix, ranges = first.groups()
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


_INSTALLED: list[str] = []
# What a rank's collective raises when a peer died (gloo, NCCL watchdog, the simulated mesh).
_PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|another rank failed|"
    r"NCCL communicator was aborted|remote process exited"
)


def abort_job(mpi: bool) -> NoReturn:
    """End every rank of the job now, this process's output flushed: MPI aborts the world
    (`mpi`), otherwise this process exits and its launcher stops the others."""
    sys.stdout.flush()
    sys.stderr.flush()
    if mpi:
        from mpi4py import MPI  # only under MPI: importing mpi4py initialises it

        MPI.COMM_WORLD.Abort(1)
    os._exit(1)


def end_job_on_exception(launcher: str) -> None:
    """Make an uncaught exception on this rank end the whole job promptly, never leave its
    peers waiting in a collective. Under mpirun MPI aborts every rank; under torchrun or
    SLURM the process leaves at once (`os._exit`, skipping a process-group teardown that can
    block on peers inside NCCL collectives) and the launcher stops the other ranks.

    Install it after `torch.distributed.init_process_group` (which wraps the hook it finds
    to prefix the rank): this one must run last, once the traceback is printed. Installing
    twice is a no-op.
    """
    if _INSTALLED:
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if _PEER_GONE.search(str(value)):
            # Not this rank's failure: the root cause is the failing rank's message.
            rank = detect_launch().rank
            sys.stderr.write(f"[rank{rank}]: stopped: another rank failed (its message says why)\n")
        else:
            # in one write: two failing ranks' tracebacks arrive whole, not interleaved
            # fragment by fragment (the message split from its exception's name)
            printed = io.StringIO()
            with contextlib.redirect_stderr(printed):
                previous(kind, value, tb)
            sys.stderr.write(printed.getvalue())
            sys.stderr.flush()
        abort_job(launcher == "mpirun")

    sys.excepthook = hook
    _INSTALLED.append(launcher)
