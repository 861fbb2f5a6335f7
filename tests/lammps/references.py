"""Single-process references for LAMMPS outputs, and the deviations the tests assert on."""

from __future__ import annotations

import numpy as np
from ase import Atoms

from nvdd_plugins import Batch
from nvdd_plugins.models import BaseModelMixin, evaluate_model
from tests.lammps.lammps_io import Snapshot

Reference = dict[str, np.ndarray]


def model_reference(model: BaseModelMixin, atoms: Atoms) -> Reference:
    """Energy, per-atom energies, forces and (3, 3) stress from `evaluate_model`."""
    out = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "forces", "stress"))
    return {
        "energy": out["energy"].numpy(),
        "energies": out["energies"].numpy(),
        "forces": out["forces"].numpy(),
        "stress": out["stress"][0].numpy(),
    }


def at_positions(atoms: Atoms, snapshot: Snapshot) -> Atoms:
    """`atoms` moved to the (id-sorted) positions of a snapshot."""
    moved = atoms.copy()
    moved.positions = snapshot.positions
    return moved


def deviations(snapshot: Snapshot, ref: Reference, atoms: Atoms) -> dict[str, float]:
    """Max deviations: energy per atom, per-atom energies, forces, and stress (virial over the
    reference volume; the atoms must be at rest)."""
    n = len(atoms)
    out = {
        "energy": abs(snapshot.energy - float(ref["energy"][0])) / n,
        "energies": float(np.abs(snapshot.energies - ref["energies"]).max()),
        "forces": float(np.abs(snapshot.forces - ref["forces"]).max()),
    }
    if "stress" in ref:
        stress = snapshot.stress() * snapshot.volume / atoms.get_volume()
        out["stress"] = float(np.abs(stress - ref["stress"]).max())
    return out
