"""Fault injection: run under `torchrun --nproc_per_node=2` or `mpirun -n 2 python`.

    python faults.py {raise,nan,kill,caught} {parallel,ase}

`parallel`: a DomainParallel NVE run where, at step 3, rank 1 raises, or the model returns
NaN (from the first evaluation on, for every atom past a wall), or rank 1 is killed with
SIGKILL; `caught`: rank 1 raises and every rank catches what `run()` raised, then calls
`DistributedManager.cleanup()`.
`ase` (mpirun only): the same through the ASE calculator and ASE's VelocityVerlet.
Prints "failing at <time>" just before the fault; a job that survives prints "SURVIVED".
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
import torch
from ase import units
from ase.md.velocitydistribution import thermalize_momenta
from ase.md.verlet import VelocityVerlet

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVE, DynamicsStage
from tests.helpers.systems import NaNBeyondWall, mpnn_model, triclinic_bulk

FAULT, PATH = sys.argv[1], sys.argv[2]
FAULT_STEP = 3


def fault(rank: int) -> None:
    """Raise or die on rank 1."""
    if rank != 1:
        return
    print(f"failing at {time.time()!r}", flush=True)
    if FAULT == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("rank 1 failed on purpose")


class Fault:
    """A LOCAL hook firing the fault at step FAULT_STEP."""

    stage = DynamicsStage.AFTER_STEP
    frequency = 1

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __call__(self, ctx, stage) -> None:
        if ctx.step == FAULT_STEP:
            fault(self.rank)


def _atoms():
    atoms = triclinic_bulk()
    thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(1))
    return atoms


def _model():
    if FAULT == "nan":  # every atom past x = 3 Å: NaN at the first evaluation
        return NaNBeyondWall(wall_x=3.0)
    return mpnn_model()


def run_parallel() -> None:
    manager = DistributedManager.initialize()
    print(f"rank {manager.rank}: {manager.mesh} on {manager.device}", flush=True)
    model = _model().to(manager.device)
    config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=manager.mesh)
    hooks = [] if FAULT == "nan" else [Fault(manager.rank)]
    atoms = _atoms()  # on every rank: under MPI, ASE broadcasts the thermal momenta
    with DomainParallel(NVE(model, 2.0), config, 20, hooks=hooks) as dynamics:
        full = Batch.from_atoms(atoms, device=manager.device) if manager.rank == 0 else None
        dynamics.partition(full)
        try:
            dynamics.run()
        except RuntimeError as err:
            if FAULT != "caught":
                raise
            print(f"rank {manager.rank} caught {type(err).__name__}", flush=True)
        else:
            print("SURVIVED", flush=True)
    DistributedManager.cleanup()


def run_ase() -> None:
    from mpi4py import MPI

    from nvdd_plugins.ase import DomainDecomposedCalculator

    atoms = _atoms()
    atoms.calc = DomainDecomposedCalculator(_model(), skin=0.3)
    dynamics = VelocityVerlet(atoms, 2 * units.fs)
    if FAULT != "nan":
        dynamics.attach(
            lambda: fault(MPI.COMM_WORLD.rank) if dynamics.nsteps == FAULT_STEP else None
        )
    dynamics.run(20)
    print("SURVIVED", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    {"parallel": run_parallel, "ase": run_ase}[PATH]()
