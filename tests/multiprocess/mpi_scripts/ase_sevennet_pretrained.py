"""Run under `mpirun -n P python -m mpi4py`: pretrained SevenNet-0 (float64) through the ASE
calculator against sevenn's own float64 forward on MgO (triclinic, slab, cluster)."""

from __future__ import annotations

from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from tests.helpers.materials import MATERIALS
from tests.helpers.sevennet_models import pretrained_reference, pretrained_sevennet
from tests.multiprocess.mpi_scripts.ase_checks import as_ase_results, compare


def main() -> None:
    world = MPI.COMM_WORLD
    model = pretrained_sevennet()
    for system in ("triclinic", "slab", "cluster"):
        ref = pretrained_reference(system) if world.rank == 0 else None
        expected = as_ase_results(world.bcast(ref))
        compare(MATERIALS[system](), DomainDecomposedCalculator(model, skin=0.5), expected, system)
    print(f"rank {world.rank}: SEVENNET-0 ASE OK", flush=True)


if __name__ == "__main__":
    main()
