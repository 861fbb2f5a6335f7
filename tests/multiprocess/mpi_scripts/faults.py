"""Fault injection: run under `torchrun --nproc_per_node=2` or `mpirun -n 2 python`.

    python faults.py {raise,nan,kill,caught,retry,stop} {parallel,ase}

`parallel`: a DomainParallel NVE run where, at step 3, rank 1 raises, or the model returns
NaN (from the first evaluation on, for every atom past a wall), or rank 1 is killed with
SIGKILL; `caught`: rank 1 raises and every rank catches what `run()` raised, then calls
`DistributedManager.cleanup()`; `retry`: the same, but every rank calls `run()` again in a
retry loop; `stop`: a GLOBAL hook raises alike on every rank at step 3 (a script's way to
stop a run), every rank catches it and carries on in step (prints "SURVIVED").
`ase` (mpirun only): the same through the ASE calculator and ASE's VelocityVerlet (`caught`:
the model raises on rank 1, which catches it and steps on).
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

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel, HookScope
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


class StopRun:
    """A GLOBAL hook that stops the run at step FAULT_STEP: it sees the same gathered system
    on every rank, so every rank raises alike."""

    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.GLOBAL
    frequency = 1

    def __call__(self, ctx, stage) -> None:
        if ctx.step == FAULT_STEP:
            raise RuntimeError(f"stopping at step {ctx.step} ({ctx.batch.num_nodes} atoms)")


class RaisesOnRank1:
    """The wrapped model, raising in its forward on rank 1 from the FAULT_STEP-th call on."""

    def __init__(self, model, rank: int) -> None:
        self.model, self.rank, self.calls = model, rank, 0
        self.forward = model.forward
        model.forward = self

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.rank == 1 and self.calls >= FAULT_STEP:
            fault(self.rank)
        return self.forward(*args, **kwargs)


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
    hooks = {"nan": [], "stop": [StopRun()]}.get(FAULT, [Fault(manager.rank)])
    atoms = _atoms()  # on every rank: under MPI, ASE broadcasts the thermal momenta
    with DomainParallel(NVE(model, 2.0), config, 20, hooks=hooks) as dynamics:
        full = Batch.from_atoms(atoms, device=manager.device) if manager.rank == 0 else None
        dynamics.partition(full)
        for attempt in range(2 if FAULT in ("retry", "stop") else 1):
            try:
                dynamics.run()
            except RuntimeError as err:
                if FAULT not in ("caught", "retry", "stop"):
                    raise
                print(f"rank {manager.rank} caught {type(err).__name__}: {err}", flush=True)
            else:
                print(f"rank {manager.rank} attempt {attempt} ran to the end", flush=True)
        if FAULT in ("raise", "nan", "kill"):
            print("SURVIVED", flush=True)
    DistributedManager.cleanup()


def run_ase() -> None:
    from mpi4py import MPI

    from nvdd_plugins.ase import DomainDecomposedCalculator

    atoms = _atoms()
    model = _model()
    if FAULT == "caught":
        RaisesOnRank1(model, MPI.COMM_WORLD.rank)
    atoms.calc = DomainDecomposedCalculator(model, skin=0.3)
    dynamics = VelocityVerlet(atoms, 2 * units.fs)
    if FAULT in ("raise", "kill"):
        dynamics.attach(
            lambda: fault(MPI.COMM_WORLD.rank) if dynamics.nsteps == FAULT_STEP else None
        )
    for _ in range(20 if FAULT == "caught" else 1):
        try:
            dynamics.run(1 if FAULT == "caught" else 20)
        except RuntimeError as err:
            if FAULT != "caught":
                raise
            print(f"rank {MPI.COMM_WORLD.rank} caught {type(err).__name__}: {err}", flush=True)
    print("SURVIVED", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    {"parallel": run_parallel, "ase": run_ase}[PATH]()
