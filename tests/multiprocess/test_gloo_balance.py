"""Re-balancing during a run on real gloo ranks: a cluster drifting through a periodic box
makes the owned atoms unequal, "auto" moves the cuts at rebuilds, and the trajectory stays
the single-process one (also weighing ranks by rows and by measured time); with
balance="off" the ranks stay unequal."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator
from nvdd_plugins.decomposition import imbalance
from nvdd_plugins.dynamics import NVE
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import drifting_cluster, lj_model

pytestmark = pytest.mark.multiprocess

STEPS, DT_FS, SKIN = 40, 4.0, 0.5
DRIFT = 0.05  # Å/fs along x: the cluster moves 8 Å, most of a sub-domain


def _run(
    comm: Communicator, balance: str, weight: str = "atoms"
) -> tuple[torch.Tensor, int, float]:
    config = DomainConfig(lj_model().cutoff, SKIN, comm, balance=balance, balance_weight=weight)
    worst = 1.0
    with DomainParallel(NVE(lj_model(), DT_FS, skin=SKIN), config, STEPS) as dd:
        dd.partition(drifting_cluster(DRIFT) if comm.rank == 0 else None)
        for _ in range(STEPS):
            dd.run(n_steps=1)
            mine = torch.zeros(comm.size, dtype=torch.float64)
            mine[comm.rank] = dd.batch.num_nodes
            worst = max(worst, imbalance(comm.all_reduce(mine, "sum")))
        positions = dd.gather(dd.batch).positions.detach()
        return positions, dd.model.domain.rebalances, worst


def _both(comm: Communicator) -> dict[str, tuple[torch.Tensor, int, float]]:
    runs = {balance: _run(comm, balance) for balance in ("auto", "off")}
    return {**runs, **{weight: _run(comm, "auto", weight) for weight in ("rows", "time")}}


def test_rebalancing_during_a_run_stays_on_the_single_process_trajectory() -> None:
    reference = drifting_cluster(DRIFT)
    dynamics = on_the_oracle(NVE(lj_model(), DT_FS, skin=SKIN))
    for _ in range(STEPS):
        dynamics.step(reference)
    for rank_results in run_gloo(3, _both, timeout=240):
        positions, rebalances, worst = rank_results["auto"]
        assert float((positions - reference.positions).abs().max()) < 1e-8
        assert rebalances >= 2  # at partition and at least once while drifting
        assert worst <= 1.25  # 32 atoms on 3 ranks: within a few atoms of 10.7
        off_positions, off_rebalances, off_worst = rank_results["off"]
        assert float((off_positions - reference.positions).abs().max()) < 1e-8
        assert off_rebalances == 0 and off_worst > worst
        for weight in ("rows", "time"):  # other costs: other cuts, the same trajectory
            weighed_positions = rank_results[weight][0]
            assert float((weighed_positions - reference.positions).abs().max()) < 1e-8, weight
        assert rank_results["time"][1] >= 2  # measured times move the cuts as it drifts
