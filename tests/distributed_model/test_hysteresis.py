"""Migration hysteresis lets an atom stay on its rank just across a face of its sub-domain;
across a *periodic* face its owned row must sit beside the sub-domain (where its ghosts
are), not a period away (it then lost its neighbours: 0.4 Å off after 100 steps)."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, SimulatedMesh, run_simulated
from nvdd_plugins.dynamics import NVE
from tests.helpers.systems import hot_bulk, lj_model


def _run(comm: Communicator) -> tuple[torch.Tensor, int]:
    model = lj_model()
    config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm, migration_hysteresis=0.2)
    with DomainParallel(NVE(model, 4.0, skin=0.5), config, 100) as dd:
        dd.partition(hot_bulk() if comm.rank == 0 else None)
        dd.run()
        migrated = int(comm.all_reduce(torch.tensor([dd.model.domain.migrated]))[0])
        return dd.gather(dd.batch).positions, migrated


@pytest.mark.parametrize("world_size", [2, 3])
def test_hysteresis_across_periodic_faces_is_exact(world_size: int) -> None:
    alone, _ = _run(SimulatedMesh(1).communicator(0))
    positions, migrated = run_simulated(world_size, _run, timeout=120)[0]
    assert migrated > 10
    assert float((positions - alone).abs().max()) < 1e-8
