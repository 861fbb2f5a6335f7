"""Every layout's view is padded by the one rule: the row count is never 1 and never the
edge-slot count (so no per-system or per-edge tensor looks node-indexed), and padding rows
sit farther than the cutoff from every row and from each other."""

from __future__ import annotations

import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.distributed_model import GivenRowsModel, HaloView
from tests.helpers.oracle import properties_for, reference, requested
from tests.helpers.systems import lj_model

CUTOFF = lj_model().cutoff


def _lone_atom() -> Atoms:
    return Atoms("Ar", positions=[[1.0, 2.0, 3.0]], cell=[20.0, 20.0, 20.0], pbc=False)


def _domain_view(strategy: StrategyKind, atoms: Atoms) -> tuple[HaloView, dict]:
    def fn(comm):
        config = DomainConfig(cutoff=CUTOFF, mesh=comm, strategy=strategy)
        model = ReplicatedModel(lj_model(), config)
        result = model(Batch.from_atoms(atoms), properties_for(atoms))
        return model.domain.view, requested(result, properties_for(atoms))

    return run_simulated(1, fn)[0]


def _given_rows_view(atoms: Atoms) -> HaloView:
    def fn(comm):
        batch = Batch.from_atoms(atoms)
        ids = torch.arange(len(atoms))
        pairs = torch.empty(2, 0, dtype=torch.long)
        layout = GivenRowsModel(lj_model(), comm, padding_species=18)
        return layout.view(len(atoms), batch.positions, batch.atomic_numbers, ids, pairs)

    return run_simulated(1, fn)[0]


def _check_padding(view: HaloView) -> None:
    assert view.n_rows not in (1, view.edge_index.shape[1]), view.n_rows
    assert view.n_rows > view.n_local
    assert torch.equal(view.global_ids[view.n_local :], torch.full((view.n_rows - 1,), -1))
    far = view.padding_positions
    apart = torch.cdist(far, far) + torch.eye(far.shape[0]) * 1e9
    assert float(apart.min()) > CUTOFF
    assert float(far[:, 0].min()) > 20.0 + CUTOFF  # beyond the box the atom sits in


@pytest.mark.parametrize("strategy", list(StrategyKind))
def test_a_lone_atom_view_is_padded_alike(strategy: StrategyKind) -> None:
    atoms = _lone_atom()
    view, result = _domain_view(strategy, atoms)
    _check_padding(view)
    ref = reference(lj_model(), atoms, properties_for(atoms))
    for name, value in ref.items():
        assert torch.equal(result[name], value), name


def test_given_rows_view_is_padded_alike() -> None:
    _check_padding(_given_rows_view(_lone_atom()))
