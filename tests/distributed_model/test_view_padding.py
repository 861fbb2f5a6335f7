"""Every layout's view is padded by `padded_view`: the row count never equals the edge-slot
count (so no per-edge tensor looks node-indexed); padding rows sit farther than the cutoff
from every row and from each other; graph-partition views get no padding rows (a model
that builds its own graph by minimum image would find them) but on a rank owning nothing."""

from __future__ import annotations

import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import HaloPlan, run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.distributed_model import (
    GivenRows,
    GivenRowsModel,
    HaloView,
    Padding,
    ViewRows,
    padded_view,
)
from tests.helpers.oracle import properties_for, reference, requested
from tests.helpers.systems import lj_model

CUTOFF = lj_model().cutoff
BOX = 20.0


def _lone_atom() -> Atoms:
    return Atoms("Ar", positions=[[1.0, 2.0, 3.0]], cell=[BOX, BOX, BOX], pbc=False)


def _domain_view(strategy: StrategyKind, atoms: Atoms) -> tuple[HaloView, dict]:
    def fn(comm):
        config = DomainConfig(cutoff=CUTOFF, mesh=comm, strategy=strategy)
        model = ReplicatedModel(lj_model(), config)
        result = model(Batch.from_atoms(atoms), properties_for(atoms))
        return model.domain.view, requested(result, properties_for(atoms))

    return run_simulated(1, fn)[0]


def _check_padding_rows(view: HaloView) -> None:
    n_pad = view.n_rows - view.n_local
    assert torch.equal(view.global_ids[view.n_local :], torch.full((n_pad,), -1))
    far = view.padding_positions
    apart = torch.cdist(far, far) + torch.eye(n_pad) * 1e9
    assert float(apart.min()) > CUTOFF
    assert float(far[:, 0].min()) > BOX + CUTOFF  # beyond the box the atoms sit in


@pytest.mark.parametrize("strategy", list(StrategyKind))
def test_a_lone_atom_view(strategy: StrategyKind) -> None:
    atoms = _lone_atom()
    view, result = _domain_view(strategy, atoms)
    assert view.n_rows != view.edge_index.shape[1]
    if strategy is StrategyKind.GRAPH_PARTITION:
        assert view.n_rows == view.n_local == 1, "no padding rows in a graph-partition view"
    else:
        assert view.n_rows == 2, "the row count is never 1 where padding rows may be added"
        _check_padding_rows(view)
    ref = reference(lj_model(), atoms, properties_for(atoms))
    for name, value in ref.items():
        assert torch.equal(result[name], value), name


def test_given_rows_view_is_padded_alike() -> None:
    def fn(comm):
        batch = Batch.from_atoms(_lone_atom())
        pairs = torch.empty(2, 0, dtype=torch.long)
        layout = GivenRowsModel(lj_model(), comm, padding_species=18)
        ids = torch.arange(1)
        layout.prepare(GivenRows(1, batch.positions, batch.atomic_numbers, ids, batch.cell, pairs))
        return layout.domain.view

    view = run_simulated(1, fn)[0]
    assert view.n_rows not in (1, view.edge_index.shape[1])  # capacities may grow beyond 2
    _check_padding_rows(view)


@pytest.mark.parametrize(("extra_rows", "rows", "slots"), [(True, 3, 2), (False, 2, 3)])
def test_rows_and_slots_never_coincide(extra_rows: bool, rows: int, slots: int) -> None:
    """Two atoms and two pairs: a padding row, or (graph partition) a sentinel slot."""

    def fn(comm):
        plan = HaloPlan.build(comm, 2, torch.empty(0, dtype=torch.long), torch.empty(0))
        positions = torch.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, 0.0]], dtype=torch.float64)
        pairs = torch.tensor([[0, 1], [1, 0]])
        local = ViewRows(plan, positions, torch.tensor([18, 18]), torch.arange(2), pairs)
        return padded_view(local, Padding(18, CUTOFF, extra_rows=extra_rows))

    view = run_simulated(1, fn)[0]
    assert (view.n_rows, view.edge_index.shape[1]) == (rows, slots)
    assert torch.equal(view.edge_index[:, :2], torch.tensor([[0, 1], [1, 0]]))
    assert bool((view.edge_index[:, 2:] == view.n_rows).all()), "empty slots hold the sentinel"


def test_far_pairs_spread_over_the_padding_rows() -> None:
    """Empty slots of a fixed-shape view join two distinct padding rows, no padding row
    receives more than its share of them (a kernel that reduces over each receiver's edges
    serialises on one row holding them all), and the per-step cutoff filter puts the same
    pairs back into the slots it empties."""
    positions = torch.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, 0.0]], dtype=torch.float64)

    def fn(comm):
        plan = HaloPlan.build(comm, 2, torch.empty(0, dtype=torch.long), torch.empty(0))
        pairs = torch.tensor([[0, 1], [1, 0]])
        local = ViewRows(plan, positions, torch.tensor([18, 18]), torch.arange(2), pairs)
        padding = Padding(18, CUTOFF, lambda n: n + 5, lambda e: e + 40, far_pairs=True)
        return padded_view(local, padding)

    view = run_simulated(1, fn)[0]
    _check_padding_rows(view)
    sender, receiver = view.edge_index[:, 2:]
    n_pad = view.n_rows - view.n_local
    assert bool((sender >= view.n_local).all() and (receiver >= view.n_local).all())
    assert bool((sender != receiver).all())
    per_row = torch.bincount(receiver - view.n_local, minlength=n_pad)
    assert int(per_row.max()) <= -(-receiver.numel() // n_pad), per_row.tolist()
    rows = torch.cat([positions, view.padding_positions])
    shifts = torch.zeros(view.edge_index.shape[1], 3, dtype=torch.float64)
    edge_index, _, _ = view.within_cutoff(rows, shifts, CUTOFF)
    assert torch.equal(edge_index, view.edge_index)
