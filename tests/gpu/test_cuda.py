"""CUDA paths equal the CPU results: models, DistributedModel, and two ranks sharing a GPU."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import Communicator, SimulatedMesh
from nvdd_plugins.models import evaluate_model
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import assert_close, errors, properties_for, requested
from tests.helpers.systems import SYSTEMS, lj_model, mpnn_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MODELS = {"lj": lj_model, "mpnn": mpnn_model}
if importlib.util.find_spec("mace") is not None:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace, with_two_species

    MODELS["mace"] = lambda: MACEWrapper(tiny_mace())


def _atoms(model_name: str, system: str):
    atoms = SYSTEMS[system]()
    return with_two_species(atoms) if model_name == "mace" else atoms


def _on_device(model_name: str, system: str, device: str, distributed: bool, comm=None):
    model = MODELS[model_name]().to(device)
    atoms = _atoms(model_name, system)
    batch = Batch.from_atoms(atoms, device=device)
    properties = properties_for(atoms)
    if distributed:
        mesh = comm or SimulatedMesh(1).communicator(0)
        dd = ReplicatedModel(model, DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=mesh))
        result = dd(batch, properties)
    else:
        result = evaluate_model(model, batch, properties)
    return {k: v.cpu() for k, v in requested(result, properties).items()}


@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_cuda_equals_cpu_float64(model_name: str, system: str) -> None:
    atoms = _atoms(model_name, system)
    reference = _on_device(model_name, system, "cpu", distributed=False)
    for distributed in (False, True):
        result = _on_device(model_name, system, "cuda", distributed)
        errs = errors(result, {k: reference[k] for k in result if k in reference}, len(atoms))
        assert_close(errs, f"{model_name}/{system}/distributed={distributed}")


def _two_ranks_one_gpu(comm: Communicator, model_name: str) -> dict[str, dict[str, float]]:
    report = {}
    for system in ("bulk", "slab"):
        atoms = _atoms(model_name, system)
        reference = _on_device(model_name, system, "cpu", distributed=False)
        result = _on_device(model_name, system, "cuda", distributed=True, comm=comm)
        report[system] = errors(result, reference, len(atoms))
    return report


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_two_ranks_sharing_the_gpu_through_host_staging(model_name: str) -> None:
    reports = run_gloo(2, _two_ranks_one_gpu, model_name, timeout=300, start_method="spawn")
    for rank, report in enumerate(reports):
        for system, errs in report.items():
            assert_close(errs, f"rank {rank}: {model_name}/{system}")


def test_a_bare_simulated_mesh_refuses_cuda_tensors() -> None:
    comm = SimulatedMesh(2).communicator(0)
    template = torch.empty(0, 3, device="cuda")
    with pytest.raises(RuntimeError, match="cannot exchange CUDA tensors"):
        comm.exchange({1: torch.ones(2, 3, device="cuda")}, {1: 2}, template=template)


@pytest.mark.parametrize("model_name", ["mpnn", "lj"])
def test_simulated_ranks_run_forward_and_backward_on_the_gpu(model_name: str) -> None:
    from nvdd_plugins.comm import run_simulated

    atoms = _atoms(model_name, "bulk")
    reference = _on_device(model_name, "bulk", "cpu", distributed=False)
    results = run_simulated(
        2, lambda comm: _on_device(model_name, "bulk", "cuda", True, comm), timeout=120
    )
    for result in results:
        assert_close(errors(result, reference, len(atoms)), model_name)


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_chunks_sized_from_free_gpu_memory_equal_one_evaluation(model_name: str) -> None:
    """`ChunkedEvaluator(max_atoms=None)` measures bytes per row on the GPU (the memory probe
    runs only on CUDA) and, through `chunk_atoms="auto"`, sizes every rank's chunks."""
    from nvdd_plugins import ChunkedEvaluator

    atoms = _atoms(model_name, "bulk")
    reference = _on_device(model_name, "bulk", "cuda", distributed=False)
    model = MODELS[model_name]().to("cuda")
    batch = Batch.from_atoms(atoms, device="cuda")
    properties = properties_for(atoms)
    chunked = ChunkedEvaluator(model, max_atoms=None)
    result = {k: v.cpu() for k, v in requested(chunked(batch, properties), properties).items()}
    assert_close(errors(result, reference, len(atoms)), f"{model_name}/ChunkedEvaluator")
    config = DomainConfig(cutoff=model.cutoff, skin=0.3, chunk_atoms="auto")
    replicated = ReplicatedModel(model, config)
    result = {k: v.cpu() for k, v in requested(replicated(batch, properties), properties).items()}
    assert_close(errors(result, reference, len(atoms)), f"{model_name}/chunk_atoms=auto")
