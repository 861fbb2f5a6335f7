"""Run under `mpirun -n P python -m mpi4py`: `get_stresses()` of the ASE calculator against
the single-process per-atom virials, their sum against the global virial, and ASE's
`LennardJones` for LJ; an open cluster has none (ASE's convention)."""

from __future__ import annotations

import importlib.util

import numpy as np
from ase.calculators.calculator import PropertyNotImplementedError
from ase.calculators.lj import LennardJones
from ase.stress import full_3x3_to_voigt_6_stress
from mpi4py import MPI

from nvdd_plugins import Batch
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.models import evaluate_model
from tests.helpers.systems import LJ_CUTOFF, LJ_EPSILON, LJ_SIGMA, SYSTEMS, lj_model, mpnn_model

VIRIAL_TOL = 1e-10  # eV
world = MPI.COMM_WORLD


def per_atom_reference(model, atoms) -> np.ndarray:
    """Single-process per-atom stresses (Voigt, eV/Å³)."""
    properties = ("energy", "forces", "stress", "stresses")
    stresses = evaluate_model(model, Batch.from_atoms(atoms), properties)["stresses"]
    return full_3x3_to_voigt_6_stress(stresses.numpy())


def check(model, atoms, reference, label: str) -> None:
    """`reference`: (N, 6) per-atom stresses, or None for a system without a cell volume."""
    atoms = atoms.copy()
    atoms.calc = DomainDecomposedCalculator(model)
    if reference is None:
        try:
            atoms.get_stresses()
        except PropertyNotImplementedError:
            return
        raise AssertionError(f"{label}: per-atom stresses without a cell volume")
    stresses = atoms.get_stresses()
    volume = atoms.get_volume()
    error = np.abs(stresses - reference).max() * volume
    summed = np.abs(stresses.sum(axis=0) - atoms.get_stress()).max() * volume
    assert error < VIRIAL_TOL and summed < VIRIAL_TOL, (label, error, summed)
    gathered = world.allgather(stresses)
    assert all(np.array_equal(s, gathered[0]) for s in gathered), (label, "ranks disagree")
    print(f"rank {world.rank}: {label} per-atom {error:.1e} eV, sum {summed:.1e} eV", flush=True)


def main() -> None:
    ase_lj = LennardJones(epsilon=LJ_EPSILON, sigma=LJ_SIGMA, rc=LJ_CUTOFF)
    models = {"mpnn": mpnn_model()}
    if importlib.util.find_spec("mace") is not None:
        from nvdd_plugins.models import MACEWrapper
        from tests.helpers.mace_models import tiny_mace, with_two_species

        models["mace"] = MACEWrapper(tiny_mace())
    for name in ("bulk", "slab", "cluster"):
        for label, model in models.items():
            atoms = SYSTEMS[name]()
            if label == "mace":
                atoms = with_two_species(atoms)
            expected = per_atom_reference(model, atoms) if atoms.cell.rank == 3 else None
            check(model, atoms, expected, f"{label}/{name}")
        atoms = SYSTEMS[name]()
        atoms.calc = ase_lj
        expected = atoms.get_stresses() if atoms.cell.rank == 3 else None
        check(lj_model(), atoms, expected, f"lj/{name}")
    print(f"rank {world.rank}: STRESSES OK", flush=True)


main()
