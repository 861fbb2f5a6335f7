"""MACE converted to cuEquivariance: the conversion, its spec (the fused GPU kernel's scatter is
marked by a MethodAdapter), and its compile preparation (mace's, for accelerated
backends). Its results through DistributedModel are
checked in tests/distributed_model/test_mace_simulated.py (CPU) and tests/gpu/test_cueq.py."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("mace")
pytest.importorskip("cuequivariance_torch")

import torch

from nvdd_plugins.models import MACEWrapper
from nvdd_plugins.models import cueq as cueq_module
from nvdd_plugins.spec import MethodAdapter, scattered_onto_nodes
from tests.helpers.mace_models import tiny_mace

pytestmark = pytest.mark.mace


@pytest.fixture(scope="module")
def cueq_wrapper() -> MACEWrapper:
    return MACEWrapper(tiny_mace(), cuequivariance=True)


def test_conversion_keeps_weights_dtype_and_the_default_dtype(cueq_wrapper) -> None:
    assert torch.get_default_dtype() == torch.float32
    assert cueq_wrapper.cuequivariance
    assert next(cueq_wrapper.parameters()).dtype == torch.float64
    assert any(
        type(m).__module__.startswith("cuequivariance_torch") for m in cueq_wrapper.modules()
    )
    distribution = cueq_wrapper.distribution_spec().distribution
    assert distribution.aggregations_marked
    assert [type(h) for h in distribution.third_party_helpers][-1] is MethodAdapter


def test_uniform_1d_forward_marks_exactly_the_indexed_outputs(monkeypatch) -> None:
    outputs = [torch.ones(4, 2), torch.ones(4, 3)]
    monkeypatch.setattr(cueq_module, "_UNIFORM_1D_FORWARD", lambda *args: outputs)
    marked = []

    class Recorder(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is scattered_onto_nodes:
                marked.append(args[0])
            return func(*args, **(kwargs or {}))

    with Recorder():
        result = cueq_module.uniform_1d_forward(None, [], {}, {1: outputs[1]}, {1: torch.zeros(2)})
    assert result == outputs
    assert len(marked) == 1 and marked[0] is outputs[1]


def test_compile_prepares_a_cueq_model_as_mace_does(cueq_wrapper) -> None:
    """compile=True takes the cuEquivariance model as it is, fx-simplified (mace's calculator
    does the same for its accelerated backends): same weights, same energies."""
    prepared = cueq_wrapper.prepare_for_compile()
    assert prepared.cuequivariance and prepared is not cueq_wrapper
    assert prepared.prepare_for_compile() is prepared
    for mine, theirs in zip(prepared.parameters(), cueq_wrapper.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_missing_cuda_kernels_are_named(monkeypatch) -> None:
    """Where cuequivariance_ops_torch does not import (on the GPU machine: a dependency of its
    kernel cache missing), the error says so, not mace's converter's AttributeError."""
    monkeypatch.setitem(sys.modules, "cuequivariance_ops_torch", None)  # import raises
    with pytest.raises(ImportError, match="cuEquivariance's CUDA kernels did not load"):
        cueq_module.require_cuda_kernels()
