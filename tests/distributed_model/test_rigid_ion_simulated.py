"""Ewald and PME under domain decomposition on simulated ranks: exact against one process,
and wrong without the all-reduce of the reciprocal-space sums (the negative control)."""

from __future__ import annotations

import numpy as np
import pytest
from ase.md.velocitydistribution import thermalize_momenta

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.dynamics import NVE
from tests.helpers.ionic import PartialSumsOnly, nacl_model, triclinic_nacl
from tests.helpers.oracle import (
    assert_every_rank_close,
    assert_trajectory_matches,
    errors,
    properties_for,
    reference,
    replicated,
)


@pytest.mark.parametrize("method", ["ewald", "pme"])
@pytest.mark.parametrize(
    ("world_size", "strategy"),
    [(2, StrategyKind.HALO), (4, StrategyKind.HALO), (3, StrategyKind.GRAPH_PARTITION)],
)
def test_reciprocal_sums_are_exact_on_simulated_ranks(
    method: str, world_size: int, strategy: StrategyKind
) -> None:
    atoms = triclinic_nacl()
    model = nacl_model(method, atoms)
    ref = reference(model, atoms, properties_for(atoms))
    label = f"{method}/{strategy}@{world_size}"
    assert_every_rank_close(world_size, model, atoms, ref, label, strategy=strategy)


@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_without_the_all_reduce_the_result_is_wrong(method: str) -> None:
    atoms = triclinic_nacl()
    ref = reference(nacl_model(method, atoms), atoms, properties_for(atoms))
    control = nacl_model(method, atoms, PartialSumsOnly)
    results = run_simulated(2, lambda comm: replicated(comm, control, atoms, properties_for(atoms)))
    for rank, result in enumerate(results):
        errs = errors(result, ref, len(atoms))
        assert errs["energy"] > 1e-3 and errs["forces"] > 1e-2, (
            f"rank {rank}: without the all-reduce of the {method} sums the result should be "
            f"far from one process, but is within {errs}: the test would not see it missing"
        )


def test_trajectory_with_migration_follows_one_process() -> None:
    atoms = triclinic_nacl(jiggle=0.0)
    thermalize_momenta(atoms, temperature_K=3000, rng=np.random.default_rng(3))
    assert_trajectory_matches(
        nacl_model("pme", atoms), Batch.from_atoms(atoms), 12, lambda m: NVE(m, 4.0, skin=0.3), 0.3
    )
