"""Run under `mpirun -n P python -m mpi4py`: the ASE calculator with Ewald and PME, its mesh
whole or in slabs (rigid-ion NaCl), against the same model in one process; per-atom stresses
refused on every rank."""

from __future__ import annotations

import numpy as np
from ase.stress import full_3x3_to_voigt_6_stress
from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from tests.helpers.ionic import nacl_model, triclinic_nacl
from tests.helpers.oracle import (
    ENERGY_PER_ATOM_TOL,
    FORCES_TOL,
    STRESS_TOL,
    properties_for,
    reference,
)

world = MPI.COMM_WORLD


def main() -> None:
    for method in ("ewald", "pme", "pme slabs"):  # slabs: Communicator.all_to_all of mpi4py
        atoms = triclinic_nacl()
        model = nacl_model(method, atoms)
        ref = reference(model, atoms, properties_for(atoms))
        atoms.calc = DomainDecomposedCalculator(model)
        n = len(atoms)
        errors = {
            "energy": abs(atoms.get_potential_energy() - float(ref["energy"])) / n,
            "energies": np.abs(atoms.get_potential_energies() - ref["energies"].numpy()).max(),
            "forces": np.abs(atoms.get_forces() - ref["forces"].numpy()).max(),
            "stress": np.abs(
                atoms.get_stress() - full_3x3_to_voigt_6_stress(ref["stress"][0].numpy())
            ).max(),
        }
        tolerances = {
            "energy": ENERGY_PER_ATOM_TOL,
            "energies": ENERGY_PER_ATOM_TOL,
            "forces": FORCES_TOL,
            "stress": STRESS_TOL,
        }
        assert all(errors[k] < tolerances[k] for k in errors), (method, world.rank, errors)
        try:
            atoms.get_stresses()
        except ValueError as err:
            assert "per-atom virials" in str(err), err
        else:
            raise AssertionError(f"{method}: per-atom stresses of a reciprocal sum were given")
        print(f"rank {world.rank}: {method} {errors}", flush=True)
    print(f"rank {world.rank}: RIGID ION OK", flush=True)


main()
