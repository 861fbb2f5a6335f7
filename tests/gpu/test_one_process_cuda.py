"""On CUDA, an integrator without `DomainParallel` runs the one-rank engine on the device and
stays on the single-process oracle's trajectory (float64 and float32)."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.dynamics import NVE
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import MD_DT_FS, MD_SKIN, hot_bulk, lj_model, mpnn_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-8), (torch.float32, 1e-3)])
@pytest.mark.parametrize("make_model", [lj_model, mpnn_model], ids=["lj", "mpnn"])
def test_plain_run_on_cuda_follows_the_oracle(make_model, dtype, tolerance: float) -> None:
    model = make_model().to("cuda", dtype)
    plain = hot_bulk().to("cuda", dtype)
    reference = hot_bulk().to("cuda", torch.float64)
    dynamics = NVE(model, MD_DT_FS, skin=MD_SKIN)
    dynamics.run(plain, 20)
    on_the_oracle(NVE(make_model().to("cuda"), MD_DT_FS)).run(reference, 20)
    assert dynamics.evaluator.engine is not None
    assert plain.positions.device.type == "cuda" and plain.positions.dtype == dtype
    assert float((plain.positions.double() - reference.positions).abs().max()) < tolerance
