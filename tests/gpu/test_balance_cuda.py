"""Balancing by measured time on CUDA: the timer synchronises the device around exchanges
and forwards, the cuts move, and the trajectory stays the single-process one."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.dynamics import NVE
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import drifting_cluster, mpnn_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

STEPS, DT_FS, SKIN = 30, 4.0, 0.5


def test_time_weighted_balance_on_cuda_stays_on_the_single_process_trajectory() -> None:
    model = mpnn_model().to("cuda")
    reference = drifting_cluster().to("cuda")
    dynamics = on_the_oracle(NVE(model, DT_FS, skin=SKIN))
    for _ in range(STEPS):
        dynamics.step(reference)

    def per_rank(comm: Communicator) -> tuple[torch.Tensor, int, float, float]:
        config = DomainConfig(model.cutoff, SKIN, comm, balance_weight="time")
        with DomainParallel(NVE(model, DT_FS, skin=SKIN), config, STEPS) as dd:
            dd.partition(drifting_cluster().to("cuda") if comm.rank == 0 else None)
            dd.run()
            timed = dd.model.comm
            positions = dd.gather(dd.batch).positions.detach().cpu()
            return positions, dd.model.domain.rebalances, timed.communicating, timed.computed

    for positions, rebalances, communicating, computed in run_simulated(3, per_rank):
        assert float((positions - reference.positions.cpu()).abs().max()) < 1e-8
        assert rebalances >= 2 and communicating > 0 and computed > 0
