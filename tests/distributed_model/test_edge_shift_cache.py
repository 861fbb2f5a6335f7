"""`HaloView.edge_shifts` computes a cell's shifts once: the same cell tensor, unmodified, or
an equal one on the CPU gets them back; a cell written in place or with other values gets
new ones (a stale product would move every periodic pair)."""

from __future__ import annotations

import torch
from ase.build import bulk

from nvdd_plugins import Batch, DistributedModel, DomainConfig
from tests.helpers.systems import lj_model


def _view_and_cell():
    full = Batch.from_atoms(bulk("Ar", "fcc", a=5.26, cubic=True).repeat(3))
    owned = full.select_nodes(torch.arange(full.num_nodes))
    owned.add_node_property("global_ids", torch.arange(full.num_nodes))
    model = DistributedModel(lj_model(), DomainConfig(cutoff=6.0, skin=0.5))
    model.setup(full)
    model(owned)
    return model.domain.view, owned.cell


def _fresh(view, cell: torch.Tensor) -> torch.Tensor:
    return view.edge_shifts(cell.clone().requires_grad_(True)).detach()


def test_same_or_equal_cell_reuses_the_shifts() -> None:
    view, cell = _view_and_cell()
    first = view.edge_shifts(cell[0])
    assert view.edge_shifts(cell[0]) is first
    assert view.edge_shifts(cell[0].clone()) is first  # equal values, on the CPU
    assert torch.equal(first, _fresh(view, cell[0]))


def test_a_changed_cell_gets_new_shifts() -> None:
    view, cell = _view_and_cell()
    first = view.edge_shifts(cell[0])
    cell[0, 0, 0] += 0.25  # in place: the same tensor, new values
    moved = view.edge_shifts(cell[0])
    assert moved is not first
    assert torch.equal(moved, _fresh(view, cell[0]))
    assert not torch.equal(moved, first)
    strained = cell[0] * 1.01
    assert torch.equal(view.edge_shifts(strained), _fresh(view, strained))
