"""The oracle catches wrong physics, and broken bring-your-own rules raise named errors."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, ChunkedEvaluator, DistributedModel, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import HaloPlan, HaloSlot, all_reduce_sum, run_simulated
from nvdd_plugins.distributed_model import Leaves
from nvdd_plugins.distributed_model.evaluation.context import HaloContext
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import ModelInputs, NeighborConfig, SimpleMPNN
from tests.helpers.oracle import errors, reference, replicated
from tests.helpers.systems import (
    SYSTEMS,
    NotReboundInteraction,
    PreSlicedMPNN,
    lj_model,
    mpnn_model,
)


def test_differentiating_the_all_reduced_energy_multiplies_forces_by_world_size(monkeypatch):
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    ref = reference(model, atoms, ("energy", "forces"))
    derive = Leaves.derive
    rank_local = threading.local()  # each virtual rank runs in its own thread

    def naive(leaves, energy, cell, model):
        total = all_reduce_sum(energy, rank_local.slot.number)
        return derive(leaves, total, cell, model)

    def run(comm):
        rank_local.slot = HaloSlot()
        rank_local.slot.bind(HaloPlan(0, 0, *[torch.empty(0, dtype=torch.long)] * 4), comm)
        return replicated(comm, model, atoms, ("energy", "forces"))

    monkeypatch.setattr(Leaves, "derive", naive)
    for world_size in (2, 4):
        result = run_simulated(world_size, run)[0]
        ratio = result["forces"] / ref["forces"]
        assert torch.allclose(ratio, torch.full_like(ratio, world_size), atol=1e-6)


def test_without_halo_refresh_the_mpnn_is_wrong(monkeypatch):
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    ref = reference(model, atoms, ("energy", "forces"))
    monkeypatch.setattr(HaloContext, "refresh", lambda self, x: x)
    monkeypatch.setattr(HaloContext, "refresh_", lambda self, x: x)
    result = run_simulated(2, lambda comm: replicated(comm, model, atoms, ("energy", "forces")))[0]
    errs = errors(result, ref, len(atoms))
    assert errs["forces"] > 1e-4 and errs["energy"] > 1e-6


class _NoSentinelFilter(SimpleMPNN):
    """Skips the sentinel filter; pairs beyond the cutoff become sentinels every step."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model_config = dataclasses.replace(
            self.model_config, neighbor_config=NeighborConfig(self.cutoff, accepts_skin_pairs=False)
        )

    def adapt_input(self, batch: Batch) -> ModelInputs:
        return ModelInputs(
            positions=batch.positions,
            atomic_numbers=batch.atomic_numbers,
            edge_index=batch.edge_index,
            shifts=batch.shifts,
            cell=batch.cell,
            pbc=batch.pbc,
            batch_idx=batch.batch_idx,
            ptr=batch.ptr,
            num_graphs=batch.num_graphs,
        )


def _run(model, world_size: int = 2):
    atoms = SYSTEMS["bulk"]()
    return run_simulated(
        world_size, lambda comm: replicated(comm, model, atoms, ("energy", "forces"))
    )


def test_pre_sliced_energies_name_the_rule():
    with pytest.raises(RuntimeError, match="do not pre-slice"):
        _run(PreSlicedMPNN(cutoff=4.5, seed=7).double())


def test_unfiltered_sentinels_name_the_rule():
    with pytest.raises(RuntimeError, match="sentinel"):
        _run(_NoSentinelFilter(cutoff=4.5, seed=7).double())


def test_unfiltered_sentinels_in_chunks_name_the_rule():
    # two atoms, two pairs: the chunk's pairs get a sentinel slot (their count would be the
    # row count), which this model indexes with
    pair = Batch.from_atoms(Atoms("H2", positions=[(0.0, 0.0, 0.0), (1.0, 0.0, 0.0)]))
    chunked = ChunkedEvaluator(_NoSentinelFilter(cutoff=4.5, seed=7).double(), max_atoms=8)
    with pytest.raises(DistributionRuleError, match="filter them in adapt_input"):
        chunked(pair)


class _FiltersOnlyOnce(_NoSentinelFilter):
    """Filters sentinels in the checked first forward only, so a later, unchecked forward
    indexes with them."""

    def adapt_input(self, batch: Batch) -> ModelInputs:
        self.calls = getattr(self, "calls", 0) + 1
        return (
            SimpleMPNN.adapt_input(self, batch) if self.calls == 1 else super().adapt_input(batch)
        )


def test_sentinels_in_an_unchecked_forward_name_the_rule():
    model = _FiltersOnlyOnce(cutoff=4.5, seed=7).double()
    atoms = SYSTEMS["bulk"]()

    def run(comm):
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)  # skin pairs: sentinels
        distributed = ReplicatedModel(model, config)
        batch = Batch.from_atoms(atoms)
        for _ in range(2):
            distributed(batch)

    with pytest.raises(RuntimeError, match="filter them in adapt_input"):
        run_simulated(1, run)


def test_in_place_scatter_without_rebinding_is_still_exact():
    model = mpnn_model()
    for layer in model.layers:
        layer.__class__ = NotReboundInteraction
    atoms = SYSTEMS["bulk"]()
    ref = reference(model, atoms, ("energy", "forces"))
    result = _run(model)[0]
    assert errors(result, ref, len(atoms))["forces"] < 1e-10


def test_model_without_spec_is_refused():
    model = lj_model()
    model.distribution_spec = lambda strategy=None: None
    with pytest.raises(DistributionRuleError, match="distribution_spec"):
        DistributedModel(model, DomainConfig(cutoff=6.0))


def test_cutoff_smaller_than_model_is_refused():
    with pytest.raises(ValueError, match="smaller than the model"):
        DistributedModel(lj_model(), DomainConfig(cutoff=3.0))
