"""What the bridge tells the user: a one-time notice from rank 0, and errors that end every
rank instead of hanging the job."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nvdd_plugins.comm import abort_job

__all__ = ["abort_on_error", "notify", "world"]


def world() -> Any:
    """mpi4py's `COMM_WORLD` (imported on first use)."""
    from mpi4py import MPI  # imported on use: importing mpi4py initialises MPI

    return MPI.COMM_WORLD


def notify(message: str) -> None:
    """Print `message` to stderr from world rank 0 (LAMMPS's log is not reachable from a
    model without the handle)."""
    if world().Get_rank() == 0:
        print(f"lammps_interface: {message}", file=sys.stderr, flush=True)


@contextmanager
def abort_on_error() -> Iterator[None]:
    """Turn an exception on any rank into an abort of every rank, with that rank's traceback.

    LAMMPS reports a Python error through `error->all`, which first waits for every rank in a
    barrier, so an error raised on some ranks only would hang the others. On one rank the
    exception propagates: LAMMPS stops with it (a Python driver receives it).
    """
    try:
        yield
    except Exception:
        comm = world()
        if comm.Get_size() == 1:
            raise
        sys.stderr.write(
            f"lammps_interface: error on rank {comm.Get_rank()}, aborting all ranks:\n"
            f"{traceback.format_exc()}"
        )
        abort_job(mpi=True)
