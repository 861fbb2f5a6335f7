"""Global-reduction ensembles under `DomainParallel` equal the single-process run: one
all-reduce of declared partial sums per step, replicated state identical on every rank."""

from __future__ import annotations

import pytest

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import FIRE, NoseHoover, local_sums
from tests.helpers.ensembles import (
    domain_parallel,
    max_deviation,
    same_replicated_state,
    single_process,
)
from tests.helpers.systems import MD_DT_FS, MD_SKIN, hot_bulk, triclinic_bulk

N_STEPS = 200


def nose_hoover(model):
    return NoseHoover(model, MD_DT_FS, temperature=300.0, tdamp=100.0, skin=MD_SKIN)


@pytest.fixture(scope="module")
def nose_hoover_reference():
    return single_process(nose_hoover, hot_bulk, N_STEPS)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_nose_hoover_matches_one_process(world_size: int, nose_hoover_reference) -> None:
    results = run_simulated(
        world_size, lambda comm: domain_parallel(comm, nose_hoover, hot_bulk, N_STEPS), 300
    )
    for result in results:
        assert max_deviation(result, nose_hoover_reference) < 1e-8
        assert result["reductions"] == N_STEPS + 1, "one all-reduce per step (+ the first)"
    assert same_replicated_state(results)
    assert all(r["owned"] > 0 for r in results)


def test_rank_local_sums_under_dd_diverge(nose_hoover_reference) -> None:
    """Negative control: the same run with the reducer put back to the single-process
    identity (each rank thermostats its own kinetic energy) is wrong."""

    def broken(model):
        dynamics = nose_hoover(model)
        dynamics.reduce_sums = local_sums  # instance attribute: DomainParallel's reducer unused
        return dynamics

    results = run_simulated(2, lambda comm: domain_parallel(comm, broken, hot_bulk, N_STEPS), 300)
    assert max_deviation(results[0], nose_hoover_reference) > 1e-3


def fire(model):
    return FIRE(model, fmax=1e-4, skin=MD_SKIN)


def relax_system():
    return Batch.from_atoms(triclinic_bulk())


def test_fire_same_minimum_in_the_same_steps() -> None:
    reference = single_process(fire, relax_system, 1000)
    assert 50 < reference["steps"] < 1000, "converges, but not at once"
    for world_size in (1, 2, 4):
        results = run_simulated(
            world_size, lambda comm: domain_parallel(comm, fire, relax_system, 1000), 300
        )
        for result in results:
            assert result["steps"] == reference["steps"], world_size
            assert max_deviation(result, reference) < 1e-8
            assert result["reductions"] == reference["steps"] + 1
        assert same_replicated_state(results)
