"""Run under `mpirun -n 2 python` WITHOUT `-m mpi4py`: the calculator itself must keep a
failure on one rank from hanging the others, and serve rank-0-only requests from its cache.

    stress  -- every rank computes the energy; then rank 0 alone asks for the stress
    raise   -- rank 1 raises after the first evaluation while rank 0 evaluates again
    early   -- rank 1 raises before it builds a calculator while rank 0 evaluates
    nan     -- rank 1's model returns NaN energies for its atoms: every rank prints the
               message it raised, and the atoms rank 1 owns
"""

from __future__ import annotations

import math
import sys

import torch
from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.distributed_model import NonFiniteError
from tests.helpers.systems import SYSTEMS, NaNBeyondWall, mpnn_model

world = MPI.COMM_WORLD
if sys.argv[1] == "early" and world.rank == 1:
    raise RuntimeError("rank 1 failed before building a calculator")
atoms = SYSTEMS["bulk"]()
if sys.argv[1] == "nan":  # the same model on both ranks, NaN for every atom on rank 1
    model = NaNBeyondWall(wall_x=-math.inf if world.rank == 1 else math.inf)
    atoms.calc = DomainDecomposedCalculator(model)
    try:
        atoms.get_potential_energy()
    except NonFiniteError as err:
        raised = f"rank {world.rank} raised: {err}"
    positions, cell = (torch.from_numpy(a) for a in (atoms.positions, atoms.cell.array))
    owners = atoms.calc.replicated_model.owners(positions, cell)
    for rank in range(world.size):  # in turn: lines of two ranks are not interleaved
        if rank == world.rank:
            print(raised, flush=True)
            print(f"rank 1 owns {(owners == 1).nonzero().flatten().tolist()}", flush=True)
        world.Barrier()
    sys.exit(0)
atoms.calc = DomainDecomposedCalculator(mpnn_model())
atoms.get_potential_energy()  # under "early", rank 0 waits here for rank 1
if sys.argv[1] == "early":
    print("rank 0 was not stopped", flush=True)
elif sys.argv[1] == "stress":
    if world.rank == 0:
        print(f"stress on rank 0 alone: {atoms.get_stress()[0]:.6f}", flush=True)
    world.Barrier()
    print(f"rank {world.rank}: DONE", flush=True)
else:
    if world.rank == 1:
        raise RuntimeError("rank 1 failed on purpose")
    atoms.positions[0, 0] += 0.5
    atoms.get_potential_energy()  # waits for rank 1
    print("rank 0 was not stopped", flush=True)
