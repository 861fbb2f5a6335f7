"""SevenNet under DistributedModel (simulated ranks) equals sevenn's own model in float64."""

from __future__ import annotations

import dataclasses
import functools

import pytest

pytest.importorskip("sevenn")

from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import SevenNetWrapper
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.mace_models import with_two_species
from tests.helpers.oracle import assert_close, errors, properties_for, replicated
from tests.helpers.sevennet_models import sevennet_reference, tiny_sevennet
from tests.helpers.systems import SYSTEMS

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
    ref = _reference(system)
    properties = properties_for(atoms)
    grid = (1, 1, world_size) if system == "slab" else None
    results = run_simulated(
        world_size, lambda comm: replicated(comm, wrapper, atoms, properties, grid=grid)
    )
    for rank, result in enumerate(results):
        assert_close(errors(result, ref, len(atoms)), f"{system}/rank{rank}")


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("system", ["bulk", "cluster"])
def test_sevennet_under_graph_partition_matches_sevenn(
    system: str, world_size: int, wrapper
) -> None:
    atoms = with_two_species(SYSTEMS[system]())
    ref = _reference(system)
    strategy = StrategyKind.GRAPH_PARTITION
    results = run_simulated(
        world_size,
        lambda comm: replicated(comm, wrapper, atoms, properties_for(atoms), strategy=strategy),
    )
    for rank, result in enumerate(results):
        assert_close(errors(result, ref, len(atoms)), f"{system}/rank{rank}/graph")


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
