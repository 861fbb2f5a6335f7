"""Tiny random-weight NequIP and Allegro models for tests, and nequip's own results for them."""

from __future__ import annotations

import torch
from ase import Atoms
from torch import nn

from nvdd_plugins.models import AllegroWrapper, NequIPWrapper, random_allegro, random_nequip

SPECIES = (18, 29)
SCALE_SHIFT = {
    "per_type_energy_shifts": {"Ar": -0.5, "Cu": -1.5},
    "per_type_energy_scales": {"Ar": 1.0, "Cu": 1.3},
}


def tiny_nequip(seed: int = 0, num_layers: int = 2) -> nn.Module:
    """NequIP: `num_layers` convolutions, l_max 1, 4 features, cutoff 4.5 Å, species Ar (18)
    and Cu (29) with per-type shift and scale, float64."""
    return random_nequip(SPECIES, num_layers=num_layers, seed=seed, **SCALE_SHIFT)


def tiny_allegro(seed: int = 0, num_layers: int = 2) -> nn.Module:
    """Allegro: `num_layers` layers, l_max 1, 8 scalar and 4 tensor features, cutoff 4.5 Å,
    species Ar and Cu with per-type shift and scale, float64."""
    return random_allegro(SPECIES, num_layers=num_layers, seed=seed, **SCALE_SHIFT)


WRAPPERS = {
    "nequip": lambda: NequIPWrapper(tiny_nequip()),
    "allegro": lambda: AllegroWrapper(tiny_allegro()),
}
"""The wrapped tiny models by name."""

BUILDERS = {"nequip": tiny_nequip, "allegro": tiny_allegro}


def nequip_reference(model: nn.Module, atoms: Atoms) -> dict[str, torch.Tensor]:
    """Energy, per-atom energies, forces and stress (if the cell has a volume) from nequip's
    own ASE calculator: its neighbour list, its whole model with its force/stress head.

    nequip builds its data in torch's default dtype, which nequip's global state sets to
    float64 (nvdd restores the caller's after building a model), so the calculator runs
    under float64 as it would in a nequip session."""
    from nequip.data.transforms import ChemicalSpeciesToAtomTypeMapper, NeighborListTransform
    from nequip.integrations.ase import NequIPCalculator
    from nequip.utils import torch_default_dtype

    atoms = atoms.copy()
    atoms.calc = NequIPCalculator(
        model,
        device="cpu",
        transforms=[
            ChemicalSpeciesToAtomTypeMapper(model_type_names=model.type_names),
            NeighborListTransform(r_max=float(model.metadata["r_max"])),
        ],
    )
    with torch_default_dtype(torch.float64):
        ref = {
            "energy": torch.tensor([atoms.get_potential_energy()], dtype=torch.float64),
            "energies": torch.tensor(atoms.get_potential_energies(), dtype=torch.float64),
            "forces": torch.tensor(atoms.get_forces(), dtype=torch.float64),
        }
        if atoms.cell.rank == 3:
            stress = atoms.get_stress(voigt=False)
            ref["stress"] = torch.tensor(stress, dtype=torch.float64).unsqueeze(0)
    return ref
