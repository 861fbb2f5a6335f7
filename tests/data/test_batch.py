"""AtomicData / Batch: construction, validation, ASE round trips, node selection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase.build import bulk, molecule

from nvdd_plugins import AtomicData, Batch


def _data(n: int = 4) -> AtomicData:
    return AtomicData(
        positions=torch.rand(n, 3, dtype=torch.float64),
        atomic_numbers=torch.full((n,), 18),
        atomic_masses=torch.full((n,), 39.95, dtype=torch.float64),
        cell=torch.eye(3, dtype=torch.float64) * 5,
        pbc=torch.tensor([True, True, True]),
    )


def test_from_data_list_offsets_edges_and_builds_batch_index() -> None:
    first, second = _data(3), _data(2)
    for data in (first, second):
        data.add_edge_property("edge_index", torch.tensor([[0, 1], [1, 0]]))
    batch = Batch.from_data_list([first, second])
    assert batch.num_graphs == 2 and batch.num_nodes == 5 and batch.num_edges == 4
    assert batch.batch_idx.tolist() == [0, 0, 0, 1, 1]
    assert batch.edge_index.tolist() == [[0, 1, 3, 4], [1, 0, 4, 3]]
    assert batch.cell.shape == (2, 3, 3) and batch.pbc.shape == (2, 3)


def test_velocities_are_added_after_construction_as_in_the_seed() -> None:
    data = _data()
    data.add_node_property("velocities", torch.zeros(4, 3, dtype=torch.float64))
    batch = Batch.from_data_list([data], device="cpu")
    assert batch.velocities.shape == (4, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"positions": torch.zeros(3, 2)}, "positions must have shape"),
        ({"positions": torch.tensor([[0.0, float("nan"), 0.0]] * 4)}, "NaN"),
        ({"atomic_masses": -torch.ones(4)}, "positive"),
        ({"atomic_numbers": torch.ones(5, dtype=torch.long)}, "atomic_numbers must have shape"),
        ({"cell": torch.eye(2)}, "cell must have shape"),
    ],
)
def test_bad_input_raises_a_clear_error(kwargs, message) -> None:
    base = {
        "positions": torch.zeros(4, 3),
        "atomic_numbers": torch.ones(4, dtype=torch.long),
        "atomic_masses": torch.ones(4),
    }
    base.update(kwargs)
    with pytest.raises(ValueError, match=message):
        AtomicData(**base)


def test_setting_a_field_checks_its_shape() -> None:
    batch = Batch.from_data_list([_data()])
    with pytest.raises(ValueError, match="velocities must have shape"):
        batch.velocities = torch.zeros(3, 3)
    with pytest.raises(AttributeError, match="add_node_property"):
        batch.unknown_thing = torch.zeros(4)


def test_ase_round_trip_keeps_everything() -> None:
    atoms = bulk("Cu", "fcc", a=3.6) * (2, 2, 2)
    atoms.set_velocities(np.random.default_rng(0).normal(size=(len(atoms), 3)))
    water = molecule("H2O")
    water.set_velocities(np.zeros((3, 3)))
    back = Batch.from_atoms([atoms, water]).to_atoms()
    assert np.allclose(back[0].positions, atoms.positions)
    assert np.allclose(back[0].get_velocities(), atoms.get_velocities())
    assert np.allclose(back[0].cell.array, atoms.cell.array) and back[0].pbc.all()
    assert back[1].get_chemical_formula() == "H2O" and not back[1].pbc.any()


def test_systems_with_different_fields_are_refused() -> None:
    first = _data()
    first.add_node_property("velocities", torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="same fields"):
        Batch.from_data_list([first, _data()])


def test_select_nodes_and_set_nodes() -> None:
    batch = Batch.from_data_list([_data(5)])
    subset = batch.select_nodes(torch.tensor([1, 3]))
    assert subset.num_nodes == 2 and torch.equal(subset.positions, batch.positions[[1, 3]])
    batch.set_nodes(
        {name: value[:2] for name, value in batch.fields() if batch.level_of(name).value == "node"}
    )
    assert batch.num_nodes == 2 and batch.batch_idx.tolist() == [0, 0]


def test_to_changes_only_floating_dtypes() -> None:
    batch = Batch.from_data_list([_data()]).to(dtype=torch.float32)
    assert batch.positions.dtype == torch.float32 and batch.atomic_numbers.dtype == torch.long


def test_copy_shares_tensors_and_clone_does_not() -> None:
    batch = Batch.from_data_list([_data()])
    copy, clone = batch.copy(), batch.clone()
    copy.add_node_property("velocities", torch.zeros(4, 3, dtype=torch.float64))
    assert "velocities" in copy and "velocities" not in batch
    assert copy.positions is batch.positions and copy.batch_idx is batch.batch_idx
    assert clone.positions is not batch.positions
    assert torch.equal(clone.positions, batch.positions) and clone.ptr.tolist() == [0, 4]
