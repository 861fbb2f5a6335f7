"""Single-process references for LAMMPS outputs, and the deviations the tests assert on."""

from __future__ import annotations

import numpy as np
from ase import Atoms

from nvdd_plugins import Batch
from nvdd_plugins.models import BaseModelMixin, evaluate_model
from tests.lammps.lammps_io import Snapshot

Reference = dict[str, np.ndarray]

LAMMPS_VIRIAL_ENTRIES = ((0, 0), (1, 1), (2, 2), (1, 0), (2, 0), (2, 1))
"""The entries of nvdd's per-atom g (x) r sums that LAMMPS's per-atom xx, yy, zz, xy, xz, yz
are: its off-diagonal ab is -r_a dE/dr_b of each pair, i.e. nvdd's (b, a) entry."""


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


def atom_virial_reference(model: BaseModelMixin, atoms: Atoms) -> np.ndarray:
    """(N, 6) per-atom virials (eV, stress sign) from `evaluate_model`'s per-atom stresses, in
    the order and sign of `Snapshot.atom_virials`."""
    out = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "forces", "stresses"))
    shares = out["stresses"].numpy() * atoms.get_volume()
    return np.stack([shares[:, a, b] for a, b in LAMMPS_VIRIAL_ENTRIES], axis=1)


def virial_deviations(snapshot: Snapshot, reference: np.ndarray) -> dict[str, float]:
    """Max deviations in eV: per-atom virials from `reference` (N, 6), and their sum from the
    global virial of the same snapshot (pressure x volume; the atoms must be at rest)."""
    virial = snapshot.stress() * snapshot.volume
    summed = snapshot.atom_virials.sum(axis=0)
    expected = np.array([virial[a, b] for a, b in LAMMPS_VIRIAL_ENTRIES])
    return {
        "per_atom": float(np.abs(snapshot.atom_virials - reference).max()),
        "sum": float(np.abs(summed - expected).max()),
    }
