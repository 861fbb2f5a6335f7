"""Run under `mpirun -n P python -m mpi4py`: NequIP and Allegro through the ASE calculator
against nequip's own ASE calculator (float64)."""

from __future__ import annotations

from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from tests.helpers.mace_models import with_two_species
from tests.helpers.nequip_models import BUILDERS, WRAPPERS, nequip_reference
from tests.helpers.systems import SYSTEMS
from tests.multiprocess.mpi_scripts.ase_checks import as_ase_results, compare


def main() -> None:
    world = MPI.COMM_WORLD
    for kind in ("nequip", "allegro"):
        model = BUILDERS[kind]()
        for system in ("bulk", "slab", "cluster"):
            atoms = with_two_species(SYSTEMS[system]())
            ref = nequip_reference(model, atoms) if world.rank == 0 else None
            expected = as_ase_results(world.bcast(ref))
            calc = DomainDecomposedCalculator(WRAPPERS[kind](), skin=0.5)
            compare(atoms, calc, expected, f"{kind}/{system}")
    print(f"rank {world.rank}: NEQUIP ASE OK", flush=True)


if __name__ == "__main__":
    main()
