"""On CUDA, the heat-flux tensors of the one-rank engine and of two simulated ranks equal the
single-process unfolded oracle on the CPU (float64), and `HeatFluxLogger` runs on the
device."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import NVE, HeatFluxLogger
from nvdd_plugins.models import HEAT_FLUX_TENSORS, evaluate_model
from tests.helpers.systems import MD_DT_FS, SYSTEMS, hot_bulk, lj_model, mpnn_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
PROPERTIES = ("energy", "forces", HEAT_FLUX_TENSORS)


@pytest.mark.parametrize("make_model", [lj_model, mpnn_model], ids=["lj", "mpnn"])
def test_tensors_on_cuda_equal_the_oracle(make_model) -> None:
    atoms = SYSTEMS["bulk"]()
    reference = evaluate_model(make_model(), Batch.from_atoms(atoms), PROPERTIES)
    model = make_model().to("cuda")

    def on_rank(comm):
        batch = Batch.from_atoms(atoms, device="cuda")
        config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm)
        return ReplicatedModel(model, config)(batch, PROPERTIES)[HEAT_FLUX_TENSORS].cpu()

    for tensors in run_simulated(2, on_rank):
        assert float((tensors - reference[HEAT_FLUX_TENSORS]).abs().max()) < 1e-10


def test_logger_on_cuda() -> None:
    model, batch = mpnn_model().to("cuda"), hot_bulk().to("cuda")
    logger = HeatFluxLogger()
    NVE(model, MD_DT_FS, hooks=[logger]).run(batch, 5)
    assert logger.series()["total"].shape == (5, 3)
