"""A tiny random-weight ScaleShiftMACE for tests (no downloads)."""

from __future__ import annotations

import mace  # noqa: F401  (before e3nn: mace sets torch.load defaults e3nn needs)
import numpy as np
import torch
from e3nn import o3
from mace import modules

MACE_R_MAX = 4.5


def tiny_mace(seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """2 interactions, 8x0e+8x1o, max_ell 2, correlation 2, species Ar (18) and Cu (29)."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = modules.ScaleShiftMACE(
        r_max=MACE_R_MAX,
        num_bessel=6,
        num_polynomial_cutoff=5,
        max_ell=2,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        num_interactions=2,
        num_elements=2,
        hidden_irreps=o3.Irreps("8x0e+8x1o"),
        MLP_irreps=o3.Irreps("8x0e"),
        gate=torch.nn.functional.silu,
        atomic_energies=np.array([-0.5, -1.5]),
        avg_num_neighbors=12.0,
        atomic_numbers=[18, 29],
        correlation=2,
        radial_type="bessel",
        atomic_inter_scale=0.1,
        atomic_inter_shift=0.0,
    )
    torch.random.set_rng_state(state)
    return model.to(dtype)


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
