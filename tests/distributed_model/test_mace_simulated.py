"""MACE under DistributedModel (simulated ranks) equals mace-torch's MACECalculator."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("mace")

import numpy as np

from nvdd_plugins import Batch, DomainConfig, DomainParallel, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import MACEWrapper
from tests.helpers.mace_models import (
    mace_calculator_reference,
    tiny_mace,
    with_two_species,
)
from tests.helpers.oracle import assert_close, errors, properties_for, replicated
from tests.helpers.systems import SYSTEMS

pytestmark = pytest.mark.mace


CUEQ = pytest.param(
    True,
    id="cueq",
    marks=pytest.mark.skipif(
        importlib.util.find_spec("cuequivariance_torch") is None,
        reason="needs cuequivariance-torch",
    ),
)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
@pytest.mark.parametrize("cuequivariance", [pytest.param(False, id="e3nn"), CUEQ])
def test_mace_matches_mace_calculator(system: str, world_size: int, cuequivariance: bool) -> None:
    """e3nn MACE, and its cuEquivariance conversion (pure PyTorch on a CPU), against e3nn
    mace-torch's own calculator."""
    model = tiny_mace()
    atoms = with_two_species(SYSTEMS[system]())
    ref = mace_calculator_reference(model, atoms)
    wrapper = MACEWrapper(model, cuequivariance=cuequivariance)
    properties = properties_for(atoms)
    grid = (1, 1, world_size) if system == "slab" else None
    results = run_simulated(
        world_size, lambda comm: replicated(comm, wrapper, atoms, properties, grid=grid)
    )
    for rank, result in enumerate(results):
        assert_close(errors(result, ref, len(atoms)), f"{system}/rank{rank}")


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", ["bulk", "slab"])
def test_mace_through_domain_parallel_matches_mace_calculator(system: str, world_size: int) -> None:
    model = tiny_mace()
    atoms = with_two_species(SYSTEMS[system]())
    atoms.set_velocities(np.zeros((len(atoms), 3)))
    ref = mace_calculator_reference(model, atoms)
    wrapper = MACEWrapper(model)

    def rank(comm):
        config = DomainConfig(cutoff=wrapper.cutoff, skin=0.3, mesh=comm)
        dd = DomainParallel(NVE(wrapper, 1.0), config)
        dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
        dd.dynamics.prepare(dd.batch)  # energy and forces of the initial configuration
        full = dd.gather(dd.batch)
        return full.energy, full.forces

    for energy, forces in run_simulated(world_size, rank):
        assert float((energy - ref["energy"]).abs().max()) / len(atoms) < 1e-10
        assert float((forces - ref["forces"]).abs().max()) < 1e-8


@pytest.mark.parametrize("world_size", [2, 3])
def test_after_the_checked_forward_mace_runs_without_interception(world_size, monkeypatch):
    from nvdd_plugins.distributed_model.evaluation.interception import HaloInterceptionMode
    from nvdd_plugins.models import evaluate_model

    calls = {"n": 0}
    original = HaloInterceptionMode.__torch_function__

    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HaloInterceptionMode, "__torch_function__", counting)
    wrapper = MACEWrapper(tiny_mace())
    atoms = with_two_species(SYSTEMS["bulk"]())
    rng = np.random.default_rng(0)
    displaced = [
        atoms.positions + rng.normal(scale=0.05, size=atoms.positions.shape) for _ in range(3)
    ]
    references = []
    for positions in displaced:
        moved = atoms.copy()
        moved.positions = positions
        batch = Batch.from_atoms(moved)
        references.append(evaluate_model(wrapper, batch, ("energy", "forces"))["forces"])

    def rank(comm):
        config = DomainConfig(cutoff=wrapper.cutoff, skin=0.5, mesh=comm)
        dd = ReplicatedModel(wrapper, config)
        worst, intercepted = [], []
        for positions in displaced:
            moved = atoms.copy()
            moved.positions = positions
            before = calls["n"]
            forces = dd(Batch.from_atoms(moved))["forces"]
            intercepted.append(calls["n"] > before)
            worst.append(forces)
        return worst, intercepted

    for forces_list, intercepted in run_simulated(world_size, rank):
        assert intercepted[0] and not any(intercepted[1:]), intercepted
        for forces, ref in zip(forces_list, references, strict=True):
            assert float((forces - ref).abs().max()) < 1e-10
