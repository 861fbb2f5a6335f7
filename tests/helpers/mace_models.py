"""A tiny random-weight ScaleShiftMACE for tests (no downloads)."""

from __future__ import annotations

import numpy as np
import torch

from nvdd_plugins.models import random_mace

MACE_R_MAX = 4.5


def tiny_mace(seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """2 interactions, 8x0e+8x1o, max_ell 2, correlation 2, species Ar (18) and Cu (29)."""
    return random_mace(
        [18, 29], r_max=MACE_R_MAX, atomic_energies=[-0.5, -1.5], seed=seed, dtype=dtype
    )


def with_two_species(atoms):
    """Make every third atom copper, so both species of `tiny_mace` occur."""
    atoms = atoms.copy()
    atoms.numbers[::3] = 29
    return atoms


def mace_calculator_reference(model: torch.nn.Module, atoms) -> dict[str, torch.Tensor]:
    """Energy, per-atom energies, forces and stress from mace-torch's own MACECalculator.

    mace replaces the cell along non-periodic axes by a large fake vector for its stress, so
    for slabs the stress is rescaled to the real cell volume (the virial is what is shared).
    """
    from mace.calculators import MACECalculator

    atoms = atoms.copy()
    atoms.calc = MACECalculator(models=model, device="cpu", default_dtype="float64")
    ref = {
        "energy": torch.tensor([atoms.get_potential_energy()], dtype=torch.float64),
        "energies": torch.tensor(atoms.get_potential_energies()),
        "forces": torch.tensor(atoms.get_forces()),
    }
    if atoms.cell.rank == 3:
        stress = torch.tensor(atoms.get_stress(voigt=False)).unsqueeze(0)
        if not atoms.pbc.all():
            fake = atoms.cell.array.copy()
            extent = np.abs(atoms.positions).max() + 1.0
            for axis in np.nonzero(~atoms.pbc)[0]:
                fake[axis] = 0.0
                fake[axis, axis] = extent * 5 * MACE_R_MAX
            stress = stress * abs(np.linalg.det(fake)) / atoms.get_volume()
        ref["stress"] = stress
    return ref
