"""Rock-salt NaCl with the Tosi-Fumi Born-Mayer-Huggins parameters, for the rigid-ion tests."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from ase import Atoms
from ase.build import bulk

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import PME, Ewald, RigidIonModel
from nvdd_plugins.models.rigid_ion import NACL_CHARGES, TOSI_FUMI_NACL
from nvdd_plugins.spec import MLIPSpec, summed_over_ranks

NACL_LATTICE = 5.64  # Å
CUTOFF = 6.0


def triclinic_nacl(repeat: int = 3, seed: int = 0, jiggle: float = 0.1) -> Atoms:
    """Rock-salt NaCl (repeat³ cubic cells of 8 ions), sheared and jiggled."""
    atoms = bulk("NaCl", "rocksalt", a=NACL_LATTICE, cubic=True).repeat(repeat)
    shear = np.array([[1.0, 0.06, 0.0], [0.0, 1.0, 0.04], [0.05, 0.0, 1.0]])
    atoms.set_cell(atoms.cell.array @ shear, scale_atoms=True)
    atoms.positions += np.random.default_rng(seed).normal(scale=jiggle, size=atoms.positions.shape)
    return atoms


def nacl_model(
    method: str, atoms: Atoms, model: type[RigidIonModel] = RigidIonModel
) -> RigidIonModel:
    """The Tosi-Fumi rigid-ion NaCl `model` with "ewald", "pme" (a 0.7 Å mesh, order 4) or
    "pme slabs" (the same with its mesh in slabs) electrostatics at an Ewald accuracy of
    1e-5 (cheap: for comparisons of one model)."""
    ewald = Ewald.for_accuracy(CUTOFF, 1e-5)
    electrostatics = ewald
    if method.startswith("pme"):
        layout = "slabs" if method == "pme slabs" else "whole"
        cell = torch.tensor(atoms.cell.array)
        electrostatics = replace(PME.for_cell(ewald.alpha, cell, 0.7, order=4), layout=layout)
    return model(NACL_CHARGES, TOSI_FUMI_NACL, CUTOFF, electrostatics)


class PartialSumsOnly(RigidIonModel):
    """Negative control: the spec without the all-reduce of the reciprocal-space sums, so
    each rank uses the structure factors (or mesh) of its own atoms only."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        spec = super().distribution_spec(strategy)
        ops = tuple(a for a in spec.distribution.custom_ops if a.op is not summed_over_ranks)
        return replace(spec, distribution=replace(spec.distribution, custom_ops=ops))
