"""DistributedModel on the simulated mesh equals the single-process run."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated
from tests.helpers.systems import SYSTEMS, ShiftPairModel, lj_model, mpnn_model

MODELS = {"lj": lj_model, "mpnn": mpnn_model, "pair": lambda: ShiftPairModel(5.0)}


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", sorted(SYSTEMS))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_matches_single_process(model_name: str, system: str, world_size: int) -> None:
    model = MODELS[model_name]()
    atoms = SYSTEMS[system]()
    properties = properties_for(atoms)
    ref = reference(model, atoms, properties)
    results = run_simulated(world_size, lambda comm: replicated(comm, model, atoms, properties))
    for rank, result in enumerate(results):
        assert_close(errors(result, ref, len(atoms)), f"{model_name}/{system}/rank{rank}")
    assert sum(int(r["n_owned"]) for r in results) == len(atoms)


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_slab_split_across_vacuum_leaves_ranks_empty(model_name: str) -> None:
    model = MODELS[model_name]()
    atoms = SYSTEMS["slab"]()
    ref = reference(model, atoms, ("energy", "forces", "stress"))
    results = run_simulated(
        4,
        lambda comm: replicated(
            comm, model, atoms, ("energy", "forces", "stress"), grid=(1, 1, 4), balance="off"
        ),
    )
    owned = [int(r["n_owned"]) for r in results]
    assert 0 in owned and sum(owned) == len(atoms)
    for result in results:
        assert_close(errors(result, ref, len(atoms)), f"{model_name}/slab z-split")


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_slab_split_across_vacuum_is_balanced_by_default(model_name: str) -> None:
    model = MODELS[model_name]()
    atoms = SYSTEMS["slab"]()
    ref = reference(model, atoms, ("energy", "forces", "stress"))
    results = run_simulated(
        4,
        lambda comm: replicated(comm, model, atoms, ("energy", "forces", "stress"), grid=(1, 1, 4)),
    )
    owned = [int(r["n_owned"]) for r in results]
    assert owned == [len(atoms) // 4] * 4
    for result in results:
        assert_close(errors(result, ref, len(atoms)), f"{model_name}/slab z-split, balanced")


def test_lj_per_atom_stresses_match() -> None:
    model, atoms = lj_model(), SYSTEMS["bulk"]()
    asked = ("energy", "forces", "stresses")  # the kernel's virials are computed when asked
    ref = reference(model, atoms, asked)
    results = run_simulated(2, lambda comm: replicated(comm, model, atoms, asked))
    assert float((results[0]["stresses"] - ref["stresses"]).abs().max()) < 1e-12


def test_results_identical_on_every_rank() -> None:
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    results = run_simulated(4, lambda comm: replicated(comm, model, atoms, ("energy", "forces")))
    for result in results[1:]:
        assert torch.equal(result["forces"], results[0]["forces"])
        assert torch.equal(result["energy"], results[0]["energy"])


def test_unsplit_wide_periodic_axes_need_no_ghosts() -> None:
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()

    def count(comm):
        distributed = ReplicatedModel(model, DomainConfig(cutoff=model.cutoff, mesh=comm))
        distributed(Batch.from_atoms(atoms), ("energy",))
        partitioner = distributed.domain.partitioner
        return distributed.domain.view.plan.n_ghost, partitioner.wrapped_axes.tolist()

    ((n_ghost, wrapped),) = run_simulated(1, count)
    assert n_ghost == 0 and wrapped == [True, True, True]
    for n_ghost, wrapped in run_simulated(2, count):
        assert n_ghost > 0 and sorted(wrapped) == [False, True, True]
