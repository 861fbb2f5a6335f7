"""UMA on simulated ranks: per-atom virials, the ghost shell its spec claims (its
edge-degree embedding is a neighbour sum too: blocks + 1 cutoffs without the per-layer
refresh), and charge-balanced channels (a sum over the whole system, all-reduced) against
fairchem's own forward. Real ranks: tests/multiprocess/test_gloo_uma.py."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("fairchem.core")

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import UMAWrapper, evaluate_model, random_uma, uma_config
from nvdd_plugins.models.uma import uma_spec
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.mace_models import with_two_species
from tests.helpers.oracle import (
    assert_close,
    errors,
    properties_for,
    reference,
    replicated,
)
from tests.helpers.systems import SYSTEMS
from tests.helpers.uma_models import TASK, tiny_uma, tiny_uma_wrapper, uma_reference

pytestmark = pytest.mark.uma


def test_per_atom_virials() -> None:
    """Per-atom virials at 2 ranks equal the single-process ones, and their sum's symmetric
    part is the global virial (eV). UMA's activations on a sphere grid are not exactly
    rotation-equivariant, so the summed virial keeps a small antisymmetric part (~1e-6 eV
    here) that the symmetric stress does not have."""
    wrapper = tiny_uma_wrapper()
    atoms = with_two_species(SYSTEMS["bulk"]())
    properties = ("energy", "forces", "stress", "stresses")
    ref = evaluate_model(wrapper, Batch.from_atoms(atoms), properties)
    volume = atoms.get_volume()
    for result in run_simulated(2, lambda comm: replicated(comm, wrapper, atoms, properties)):
        assert float((result["stresses"] - ref["stresses"]).abs().max()) * volume < 1e-10
        summed = result["stresses"].sum(0)
        symmetric = (summed + summed.T) / 2 - result["stress"][0]
        assert float(symmetric.abs().max()) * volume < 1e-10


class _UMAForgettingEdgeDegree(UMAWrapper):
    """UMA claiming one cutoff per block only (wrong: the edge-degree embedding before the
    blocks sums over neighbours too)."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        spec = super().distribution_spec(strategy)
        return dataclasses.replace(spec, n_layers=self.model.backbone.num_layers)


def _chunked_errors(wrapper: UMAWrapper) -> list[dict[str, float]]:
    """2 ranks, each evaluating its sub-domain with a ghost shell of the spec's n_layers
    cutoffs and no exchange inside the forward (one chunk a rank)."""
    atoms = with_two_species(SYSTEMS["bulk"]())
    properties = properties_for(atoms)
    ref = reference(wrapper, atoms, properties)
    results = run_simulated(
        2, lambda comm: replicated(comm, wrapper, atoms, properties, chunk_atoms=100_000)
    )
    return [errors(result, ref, len(atoms)) for result in results]


def test_ghost_shell_is_blocks_plus_one_cutoffs() -> None:
    model = tiny_uma(num_layers=1)
    for rank, errs in enumerate(_chunked_errors(UMAWrapper(model, task_name=TASK))):
        assert_close(errs, f"uma, 1 block, 2 cutoffs, rank {rank}")
    wrong = _chunked_errors(_UMAForgettingEdgeDegree(model, task_name=TASK))
    assert min(errs["forces"] for errs in wrong) > 1e-6, wrong


class _BalancedWithoutAllReduce(UMAWrapper):
    """Balanced channels without the adapter: each rank balances its own rows (wrong)."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        return uma_spec(n_layers=None)


@pytest.mark.parametrize("world_size", [2, 4])
def test_charge_balanced_channels_match_fairchem(world_size: int) -> None:
    model = random_uma(uma_config(charge_balanced_channels=[0, 1], spin_balanced_channels=[2]))
    atoms = with_two_species(SYSTEMS["bulk"]())
    ref = uma_reference(model, atoms, charge=1)
    properties = properties_for(atoms)
    wrapper = UMAWrapper(model, task_name=TASK, charge=1)
    for rank, result in enumerate(
        run_simulated(world_size, lambda comm: replicated(comm, wrapper, atoms, properties))
    ):
        assert_close(errors(result, ref, len(atoms)), f"balanced, rank {rank}/{world_size}")
    wrong = _BalancedWithoutAllReduce(model, task_name=TASK, charge=1)
    results = run_simulated(world_size, lambda comm: replicated(comm, wrong, atoms, properties))
    assert min(errors(result, ref, len(atoms))["forces"] for result in results) > 1e-6
