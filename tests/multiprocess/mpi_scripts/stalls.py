"""Silent waits that the collective watchdog must turn into a message and the end of the
job. Run under `mpirun -n 2 python -m mpi4py stalls.py CASE` with a short
NVDD_COLLECTIVE_TIMEOUT_S:

    ase_collective -- rank 0 alone builds the system and calls ASE's thermalize_momenta
                      without comm=DummyMPI() (ASE's own collective) while rank 1 enters
                      DomainParallel.partition
    one_rank_calc  -- the ASE calculator's computing call on rank 1 only; rank 0 ends its
                      script
    mismatched     -- the user's own code runs more steps on rank 0 than on rank 1 (also
                      under torchrun); before that, rank 1 computes for 1.5 s while rank 0
                      waits for it (a wait below the limit: no stall)

Every case prints "SURVIVED" if the job carries on past the stall.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta
from ase.parallel import DummyMPI

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import LennardJonesModel

CASE = sys.argv[1]


def argon(comm=None) -> Batch:
    """108 argon atoms with 120 K velocities (ASE's collective when `comm` is None)."""
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True) * (3, 3, 3)
    rng = np.random.default_rng(0)
    if comm is None:
        thermalize_momenta(atoms, temperature_K=120.0, rng=rng)
    else:
        thermalize_momenta(atoms, temperature_K=120.0, rng=rng, comm=comm)
    return Batch.from_atoms(atoms)


model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=8.5, shift=True)
if CASE == "one_rank_calc":
    from mpi4py import MPI

    atoms = bulk("Ar", "fcc", a=5.3, cubic=True) * (3, 3, 3)
    atoms.calc = DomainDecomposedCalculator(model, skin=0.5)
    if MPI.COMM_WORLD.rank == 1:
        atoms.get_potential_energy()
    else:
        print("rank 0: script ends", flush=True)
        sys.exit(0)
else:
    manager = DistributedManager.initialize()
    config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=manager.mesh)
    with DomainParallel(NVE(model, dt=5.0), config, n_steps=4) as dd:
        if CASE == "ase_collective":
            dd.partition(argon() if manager.rank == 0 else None)
        else:
            dd.partition(argon(DummyMPI()) if manager.rank == 0 else None)
        if CASE == "mismatched" and manager.rank == 1:
            time.sleep(1.5)  # below the limit the tests set
        dd.run()
        if CASE == "mismatched" and manager.rank == 0:
            dd.run(2)
    DistributedManager.cleanup()
print(f"rank: SURVIVED {CASE}", flush=True)
