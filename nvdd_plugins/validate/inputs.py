"""What a validation runs on: the sample system, the model copy in its precision, the
properties compared and their tolerances."""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from ase import Atoms
from ase.build import bulk
from ase.data import chemical_symbols

from nvdd_plugins.data import Batch
from nvdd_plugins.models import BaseModelMixin

__all__ = ["TOLERANCES", "default_sample", "in_precision", "properties_for", "sample_atoms"]

TOLERANCES = {
    torch.float64: {"energy": 1e-10, "energies": 1e-10, "forces": 1e-8, "stress": 1e-9},
    torch.float32: {"energy": 1e-5, "energies": 1e-5, "forces": 1e-4, "stress": 1e-5},
}
"""Largest deviation from the single-process run, per precision: energy per atom (eV),
per-atom energies (eV), forces (eV/Å), stress (eV/Å³); each scaled by max(1, largest
single-process value)."""

_ARGON = 18
_SHEAR = np.array([[1.0, 0.04, 0.0], [0.0, 1.0, 0.03], [0.02, 0.0, 1.0]])


def _sample_species(model: BaseModelMixin) -> int:
    """The element of the default sample: argon, unless the model has no parameters for it;
    then the lightest element it has."""
    species = model.supported_species()
    return _ARGON if species is None or _ARGON in species else species[0]


def default_sample(cutoff: float, skin: float, species: int) -> Atoms:
    """An fcc crystal of element `species` at a nearest-neighbour distance of half `cutoff`
    (dozens of neighbours per atom), in a sheared periodic box wider than
    2 (cutoff + skin) + 15 %, rattled."""
    a = math.sqrt(2.0) * 0.5 * cutoff
    cells = max(3, math.ceil(2.0 * (cutoff + skin) * 1.15 / a))
    atoms = bulk(chemical_symbols[species], "fcc", a=a, cubic=True) * (cells, cells, cells)
    atoms.set_cell(atoms.cell.array @ _SHEAR, scale_atoms=True)
    atoms.rattle(0.05 * a, seed=7)
    return atoms


def sample_atoms(sample: Atoms | Batch | None, model: BaseModelMixin, skin: float) -> Atoms:
    """The system to validate `model` on: `sample` (one system) or `default_sample` of one
    of the model's species."""
    if sample is None:
        return default_sample(model.cutoff, skin, _sample_species(model))
    if isinstance(sample, Batch):
        systems = sample.to_atoms()
        if len(systems) != 1:
            raise ValueError(f"validate on one system; the batch holds {len(systems)}")
        return systems[0]
    return sample.copy()


def in_precision(
    model: BaseModelMixin, device: torch.device
) -> tuple[BaseModelMixin, torch.dtype, str | None]:
    """A copy of `model` on `device` in float64 where it converts, else in its own
    precision; with a note when float64 was not possible."""
    try:
        return copy.deepcopy(model).to(device=device, dtype=torch.float64), torch.float64, None
    except Exception as err:  # a model that cannot be copied or converted keeps its dtype
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        note = f"validated in {dtype} (float64 copy failed: {err})"
        return model.to(device), dtype or torch.float32, note


def properties_for(model: BaseModelMixin, atoms: Atoms) -> tuple[str, ...]:
    """Energy and forces, and stress when the model derives it and the cell has a volume."""
    stress = "stress" in model.model_config.autograd_outputs and atoms.cell.rank == 3
    return ("energy", "forces", "stress") if stress else ("energy", "forces")
