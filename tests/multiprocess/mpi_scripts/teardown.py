"""Process teardown under repetition: `python teardown.py N` starts 2 gloo ranks N times with
the spawn start method (each rank's interpreter ends normally, as under torchrun). Each rank
makes a few collectives through `DistributedManager`'s mesh; every other run ends without
`DistributedManager.cleanup()`, and rank 1 ends its script 0.5 s after rank 0. Prints one
line per run and exits 1 unless every rank of every run exited 0.

Before nvdd tore a left-over process group down at exit, a rank whose script ended first
without cleanup aborted at exit ("terminate called without an active exception") in 2 of 16
such runs.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
import time

import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

LINGER_S = 0.5


def rank_main(rank: int, port: int, cleanup: bool) -> None:
    """One rank: collectives, then the end of its script (with or without cleanup)."""
    faulthandler.enable(all_threads=True)  # an abort at exit shows where it happened
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch

    from nvdd_plugins import DistributedManager

    mesh = DistributedManager.initialize().mesh
    for _ in range(10):
        mesh.all_reduce(torch.ones(8))
        mesh.exchange({1 - rank: torch.ones(4, 3)}, {1 - rank: 4}, torch.empty(0, 3))
        mesh.all_gather(torch.ones(2, 2))
    if cleanup:
        DistributedManager.cleanup()
    if rank == 1:
        time.sleep(LINGER_S)


def main() -> int:
    failures = 0
    for run in range(int(sys.argv[1])):
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        cleanup = run % 2 == 1
        try:
            mp.spawn(rank_main, args=(port, cleanup), nprocs=2)
            outcome = "ok"
        except ProcessExitedException as err:
            failures += 1
            outcome = f"rank {err.error_index} ended with {err.signal_name or err.exit_code}"
        except ProcessRaisedException as err:
            failures += 1
            outcome = f"rank {err.error_index} raised"
        print(f"run {run} ({'with' if cleanup else 'without'} cleanup): {outcome}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
