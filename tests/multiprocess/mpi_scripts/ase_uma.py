"""Run under `mpirun -n P python -m mpi4py`: UMA through the ASE calculator against
fairchem's own forward (float64)."""

from __future__ import annotations

from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from tests.helpers.mace_models import with_two_species
from tests.helpers.systems import SYSTEMS
from tests.helpers.uma_models import tiny_uma, tiny_uma_wrapper, uma_reference
from tests.multiprocess.mpi_scripts.ase_checks import as_ase_results, compare


def main() -> None:
    world = MPI.COMM_WORLD
    model = tiny_uma()
    for system in ("bulk", "slab", "cluster"):
        atoms = with_two_species(SYSTEMS[system]())
        ref = uma_reference(model, atoms) if world.rank == 0 else None
        expected = as_ase_results(world.bcast(ref))
        calc = DomainDecomposedCalculator(tiny_uma_wrapper(), skin=0.5)
        compare(atoms, calc, expected, f"uma/{system}")
    print(f"rank {world.rank}: UMA ASE OK", flush=True)


if __name__ == "__main__":
    main()
