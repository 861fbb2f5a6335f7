"""Run under `mpirun -n P python -m mpi4py`: pretrained CHGNet 0.3.0 (float64) through the
ASE calculator against chgnet's own float64 forward on MgO (the cluster and the 17 Å rod),
magnetic moments included."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from tests.helpers.chgnet_models import chgnet_reference, pretrained_chgnet
from tests.helpers.materials import MATERIALS, mgo_rod
from tests.multiprocess.mpi_scripts.ase_checks import as_ase_results, compare


def main() -> None:
    world = MPI.COMM_WORLD
    model = pretrained_chgnet()
    for system, atoms in (("cluster", MATERIALS["cluster"]()), ("rod", mgo_rod())):
        ref = chgnet_reference(model.model, atoms) if world.rank == 0 else None
        ref = world.bcast(ref)
        calc = DomainDecomposedCalculator(model, skin=0.5)
        compare(atoms, calc, as_ase_results(ref), system)
        checked = atoms.copy()
        checked.calc = calc
        magmoms = checked.get_magnetic_moments()
        assert np.abs(magmoms - ref["magmoms"].numpy()).max() < 1e-10, system
    print(f"rank {world.rank}: CHGNET ASE OK", flush=True)


if __name__ == "__main__":
    main()
