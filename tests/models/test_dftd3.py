"""DFTD3Model in one process against the reference implementation's own numbers
(simple-dftd3, the `dftd3` package) on a molecule and a crystal, two-body PBE-D3(BJ) with the
same cutoffs. Its distributed runs: tests/distributed_model/test_composed_simulated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("tad_dftd3")
pytest.importorskip("dftd3.interface")

import numpy as np
from ase.build import bulk, molecule

from nvdd_plugins import Batch
from nvdd_plugins.models import evaluate_model
from tests.helpers.dispersion import simple_dftd3, small_d3
from tests.helpers.oracle import properties_for

pytestmark = pytest.mark.d3


def _crystal():
    """Diamond silicon, sheared and jiggled (64 atoms)."""
    atoms = bulk("Si", "diamond", a=5.43, cubic=True) * (2, 2, 2)
    shear = np.array([[1.0, 0.05, 0.0], [0.0, 1.0, 0.03], [0.04, 0.0, 1.0]])
    atoms.set_cell(atoms.cell.array @ shear, scale_atoms=True)
    atoms.positions += np.random.default_rng(0).normal(scale=0.05, size=atoms.positions.shape)
    return atoms


@pytest.mark.parametrize(
    ("atoms", "cutoffs"),
    [(molecule("C6H6"), (15.0, 10.0)), (_crystal(), (10.0, 8.0))],
    ids=["benzene", "silicon"],
)
def test_matches_simple_dftd3(atoms, cutoffs) -> None:
    """Measured: energy 2e-12 (benzene) and 4e-11 eV/atom (silicon), forces 7e-11 eV/Å."""
    ref = simple_dftd3(atoms, *cutoffs)
    ours = evaluate_model(small_d3(*cutoffs), Batch.from_atoms(atoms), properties_for(atoms))
    assert abs(float(ours["energy"] - ref["energy"])) / len(atoms) < 1e-10
    assert float((ours["forces"] - ref["forces"]).abs().max()) < 1e-8
    if "stress" in ref:
        assert float((ours["stress"] - ref["stress"]).abs().max()) < 1e-9
    assert float(ref["energy"]) < -0.1 and float(ref["forces"].abs().max()) > 1e-4


def test_the_coordination_numbers_matter() -> None:
    """Negative control: another coordination-number cutoff gives other C6, so the
    comparison sees the coordination numbers."""
    atoms = _crystal()
    ref = simple_dftd3(atoms, 10.0, 8.0)
    ours = evaluate_model(small_d3(10.0, 4.0), Batch.from_atoms(atoms), ("energy",))
    assert abs(float(ours["energy"] - ref["energy"])) / len(atoms) > 1e-6


def test_unknown_elements_are_refused() -> None:
    atoms = molecule("H2O")
    atoms.numbers[0] = 110
    with pytest.raises(ValueError, match="elements 1 to"):
        evaluate_model(small_d3(), Batch.from_atoms(atoms), ("energy",))
