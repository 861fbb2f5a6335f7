"""A tiny random-weight UMA model for tests, and fairchem's own results for it."""

from __future__ import annotations

import torch
from ase import Atoms
from torch import nn

from nvdd_plugins.models.uma import UMAWrapper
from nvdd_plugins.models.uma_builders import random_uma, uma_config

TASK = "omat"


def tiny_uma(seed: int = 0, num_layers: int = 2) -> nn.Module:
    """fairchem's eSCN-MD: `num_layers` blocks, lmax 2, 8 channels, cutoff 4.5 Å, float64."""
    return random_uma(uma_config(num_layers=num_layers), seed=seed)


def tiny_uma_wrapper() -> UMAWrapper:
    """`tiny_uma()` wrapped for the "omat" task."""
    return UMAWrapper(tiny_uma(), task_name=TASK)


def uma_reference(model: nn.Module, atoms: Atoms, charge: int = 0) -> dict[str, torch.Tensor]:
    """Energy, forces and stress (if the cell has a volume) from fairchem's whole model on
    its own input (`AtomicData.from_ase` with the system's total `charge`, its graph built by
    the backbone), and the per-atom energies of its energy head's block on its backbone's
    output."""
    from fairchem.core.datasets.atomic_data import AtomicData

    atoms = atoms.copy()
    atoms.info["charge"] = charge

    def data() -> AtomicData:
        return AtomicData.from_ase(
            atoms,
            task_name=TASK,
            radius=model.backbone.cutoff,
            target_dtype=torch.float64,
            r_data_keys=["charge"],
        )

    out = model(data())["efs"]
    block = model.output_heads["efs"].energy_block
    energies = block(model.backbone(data())["node_embedding"][:, 0, :]).reshape(-1)
    ref = {
        "energy": out["energy"]["energy"].detach(),
        "energies": energies.detach(),
        "forces": out["forces"]["forces"].detach(),
    }
    if atoms.cell.rank == 3:
        ref["stress"] = out["stress"]["stress"].detach().reshape(1, 3, 3)
    return ref
