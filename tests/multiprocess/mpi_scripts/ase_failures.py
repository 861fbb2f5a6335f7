"""Run under `mpirun -n 2 python` WITHOUT `-m mpi4py`: the calculator itself must keep a
failure on one rank from hanging the others, and serve rank-0-only requests from its cache.

    stress  -- every rank computes the energy; then rank 0 alone asks for the stress
    raise   -- rank 1 raises after the first evaluation while rank 0 evaluates again
    early   -- rank 1 raises before it builds a calculator while rank 0 evaluates
"""

from __future__ import annotations

import sys

from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from tests.helpers.systems import SYSTEMS, mpnn_model

world = MPI.COMM_WORLD
if sys.argv[1] == "early" and world.rank == 1:
    raise RuntimeError("rank 1 failed before building a calculator")
atoms = SYSTEMS["bulk"]()
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
