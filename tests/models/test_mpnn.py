"""SimpleMPNN: autograd forces and stress equal finite differences; forces sum to zero."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import SimpleMPNN, evaluate_model
from tests.helpers.systems import SYSTEMS, mpnn_model


def _energy(model, atoms) -> float:
    return float(evaluate_model(model, Batch.from_atoms(atoms), ("energy",))["energy"][0])


@pytest.mark.parametrize("system", ["bulk", "cluster", "slab"])
def test_forces_equal_finite_differences(system: str) -> None:
    model, atoms = mpnn_model(), SYSTEMS[system]()
    forces = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "forces"))["forces"]
    h = 1e-5
    for atom, axis in [(0, 0), (5, 1), (17, 2), (len(atoms) - 1, 0)]:
        plus, minus = atoms.copy(), atoms.copy()
        plus.positions[atom, axis] += h
        minus.positions[atom, axis] -= h
        numeric = -(_energy(model, plus) - _energy(model, minus)) / (2 * h)
        assert abs(numeric - float(forces[atom, axis])) < 1e-7
    assert float(forces.sum(0).abs().max()) < 1e-10


def test_stress_equals_strain_derivative() -> None:
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    stress = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "stress"))["stress"][0]
    h = 1e-6
    for i, j in [(0, 0), (1, 2), (2, 2)]:
        strain = torch.zeros(3, 3, dtype=torch.float64)
        strain[i, j] = strain[j, i] = h / 2 if i != j else h
        energies = []
        for sign in (1, -1):
            deformed = atoms.copy()
            deformation = (torch.eye(3, dtype=torch.float64) + sign * strain).numpy()
            deformed.set_cell(atoms.cell.array @ deformation, scale_atoms=True)
            energies.append(_energy(model, deformed))
        numeric = (energies[0] - energies[1]) / (2 * h) / atoms.get_volume()
        assert abs(numeric - float(stress[i, j])) < 1e-8


def test_needs_minimum_image_safe_cells() -> None:
    atoms = SYSTEMS["small_box"]()
    with pytest.raises(ValueError, match="minimum-image"):
        evaluate_model(SimpleMPNN(cutoff=5.0).double(), Batch.from_atoms(atoms))


def test_weights_depend_only_on_the_seed() -> None:
    a, b = SimpleMPNN(seed=3), SimpleMPNN(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
