"""`trace_and_validate(device="cuda")`: simulated ranks on one GPU pass a correct model and
find an opaque aggregation's adapter, as on the CPU."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.validate import trace_and_validate
from tests.validate import defects

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_correct_model_is_ok_on_the_gpu(world_size: int) -> None:
    report = trace_and_validate(defects.mpnn(), world_size=world_size, device="cuda")
    assert report.ok, report
    assert "cuda" in report.setting and "float64" in report.setting


def test_an_opaque_aggregation_is_fixed_on_the_gpu() -> None:
    model = defects.mpnn(defects.OpaqueAggregationLayer, cls=defects.WithSpec)
    report = trace_and_validate(model, device="cuda")
    assert not report.ok and "output_transforms={0: ScatterOutputs()}" in report.next_action
    model.spec = report.spec
    assert trace_and_validate(model, device="cuda").ok
