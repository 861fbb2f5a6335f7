"""MACE with cuEquivariance's fused GPU kernels through DistributedModel equals the same model
run single-process on the GPU, at 1, 2 and 4 ranks sharing the GPU (gloo processes: threads
would share autograd's one CUDA worker thread), in float64 and float32; without the spec's
adapter the fused convolution's scatter is missed (negative control)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import Communicator, SimulatedMesh
from nvdd_plugins.models import evaluate_model
from nvdd_plugins.spec import SPEC_MPNN_HALO
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import FORCES_TOL, assert_close, errors, properties_for, requested
from tests.helpers.systems import SYSTEMS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.mace,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(
        importlib.util.find_spec("cuequivariance_ops_torch") is None
        or importlib.util.find_spec("mace") is None,
        reason="needs mace-torch and cuequivariance-ops-torch",
    ),
]


def _fused_wrapper(dtype: torch.dtype):
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    wrapper = MACEWrapper(tiny_mace(dtype=dtype).to("cuda"), cuequivariance=True)
    assert hasattr(wrapper.model.interactions[0].conv_tp, "original_forward"), "not fused"
    return wrapper


def _errors(comm: Communicator, wrapper, system: str) -> dict[str, float]:
    from tests.helpers.mace_models import with_two_species

    atoms = with_two_species(SYSTEMS[system]())
    properties = properties_for(atoms)
    batch = Batch.from_atoms(atoms, device="cuda", dtype=next(wrapper.parameters()).dtype)
    ref = requested(evaluate_model(wrapper, batch, properties), properties)
    grid = (1, 1, comm.size) if system == "slab" else None
    config = DomainConfig(cutoff=wrapper.cutoff, skin=0.3, mesh=comm, grid=grid)
    result = ReplicatedModel(wrapper, config)(batch, properties)
    return errors(requested(result, properties), ref, len(atoms))


def check_rank(comm: Communicator) -> dict[str, dict[str, float]]:
    """Every system in float64, the bulk crystal in float32, and the negative control."""
    report = {}
    for system in ("bulk", "slab", "cluster"):
        report[f"{system}/float64"] = _errors(comm, _fused_wrapper(torch.float64), system)
    report["bulk/float32"] = _errors(comm, _fused_wrapper(torch.float32), "bulk")
    if comm.size > 1:
        unadapted = _fused_wrapper(torch.float64)
        unadapted.distribution_spec = lambda strategy=None: SPEC_MPNN_HALO
        report["bulk/no adapter"] = _errors(comm, unadapted, "bulk")
    return report


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_fused_cueq_mace_equals_single_process(world_size: int) -> None:
    if world_size == 1:
        reports = [check_rank(SimulatedMesh(1).communicator(0))]
    else:
        reports = run_gloo(world_size, check_rank, timeout=400, start_method="spawn")
    for rank, report in enumerate(reports):
        print(rank, report)
        for label, errs in report.items():
            if label.endswith("float64"):
                assert_close(errs, f"rank {rank}: {label}")
            elif label.endswith("float32"):
                assert errs["forces"] < 1e-5, (rank, label, errs)
            else:
                assert errs["forces"] > 100 * FORCES_TOL, (rank, label, errs)  # it matters
