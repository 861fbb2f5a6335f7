"""SevenNet under DistributedModel (simulated ranks) equals sevenn's own model in float64."""

from __future__ import annotations

import dataclasses
import functools

import pytest

pytest.importorskip("sevenn")

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import SevenNetWrapper, evaluate_model
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.mace_models import with_two_species
from tests.helpers.oracle import (
    assert_every_rank_close,
    assert_trajectory_matches,
    properties_for,
    replicated,
)
from tests.helpers.sevennet_models import sevennet_reference, tiny_sevennet
from tests.helpers.systems import MD_SKIN, SYSTEMS, hot_bulk, md_integrator

pytestmark = pytest.mark.sevenn


@pytest.fixture(scope="module")
def wrapper() -> SevenNetWrapper:
    return SevenNetWrapper(tiny_sevennet())


@functools.cache
def _reference(system: str) -> dict:
    return sevennet_reference(tiny_sevennet(), with_two_species(SYSTEMS[system]()))


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
def test_sevennet_matches_sevenn(system: str, world_size: int, wrapper) -> None:
    atoms = with_two_species(SYSTEMS[system]())
    grid = (1, 1, world_size) if system == "slab" else None
    assert_every_rank_close(world_size, wrapper, atoms, _reference(system), system, grid=grid)


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("system", ["bulk", "cluster"])
def test_sevennet_under_graph_partition_matches_sevenn(
    system: str, world_size: int, wrapper
) -> None:
    atoms = with_two_species(SYSTEMS[system]())
    graph = StrategyKind.GRAPH_PARTITION
    assert_every_rank_close(world_size, wrapper, atoms, _reference(system), system, strategy=graph)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", ["bulk", "slab"])
def test_sevennet_per_atom_virials(system: str, world_size: int, wrapper) -> None:
    """Per-atom virials equal the single-process ones and sum to the global virial (eV)."""
    atoms = with_two_species(SYSTEMS[system]())
    properties = ("energy", "forces", "stress", "stresses")
    ref = evaluate_model(wrapper, Batch.from_atoms(atoms), properties)
    volume = atoms.get_volume()
    results = run_simulated(world_size, lambda comm: replicated(comm, wrapper, atoms, properties))
    for result in results:
        assert float((result["stresses"] - ref["stresses"]).abs().max()) * volume < 1e-10
        summed = result["stresses"].sum(0) - result["stress"][0]
        assert float(summed.abs().max()) * volume < 1e-10


def test_sevennet_trajectory_matches_one_process(wrapper) -> None:
    """100 NVE steps of hot Ar (atoms migrate; Verlet pairs pruned to the cutoff each step) on
    2 ranks: positions on the single-process trajectory."""
    full = hot_bulk()
    nve = functools.partial(md_integrator, "nve")
    assert_trajectory_matches(wrapper, full, 100, nve, MD_SKIN)


class _WrongReceiverRow(SevenNetWrapper):
    """Claims that messages go onto `edge_index[1]` (sevenn writes onto `edge_index[0]`)."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        spec = super().distribution_spec(strategy)
        distribution = dataclasses.replace(spec.distribution, edge_target_row=1)
        return dataclasses.replace(spec, distribution=distribution)


def test_a_wrong_receiver_row_claim_is_refused() -> None:
    atoms = with_two_species(SYSTEMS["bulk"]())
    wrapper = _WrongReceiverRow(tiny_sevennet())
    with pytest.raises(RuntimeError, match="edge_target_row"):
        run_simulated(2, lambda comm: replicated(comm, wrapper, atoms, properties_for(atoms)))
