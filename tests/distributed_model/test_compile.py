"""compile=True: fixed shapes, no recompiles after warm-up across rebuilds, equal to eager."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
import torch
from ase.md.velocitydistribution import thermalize_momenta
from torch._dynamo.utils import counters

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import SimulatedMesh
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import NeighborConfig, SimpleMPNN
from tests.helpers.systems import lj_model, triclinic_bulk

MODELS = ["lj"] + (
    # Inductor compiles tiny MACE's forward and backward in 1-4 minutes on two cores
    [pytest.param("mace", marks=pytest.mark.slow)]
    if importlib.util.find_spec("mace") is not None
    else []
)


def _model_and_atoms(name: str):
    if name == "lj":
        return lj_model().float(), triclinic_bulk()
    from nvdd_plugins.models import MACEWrapper  # mace is optional
    from tests.helpers.mace_models import tiny_mace, with_two_species

    return MACEWrapper(tiny_mace(dtype=torch.float32)), with_two_species(triclinic_bulk())


def _trajectory(model, atoms, compile_: bool, warm_up: int, steps: int):
    """Positions after warm_up + steps NVE steps; graphs compiled and rebuilds after warm-up."""
    thermalize_momenta(atoms, temperature_K=600, rng=np.random.default_rng(0))
    mesh = SimulatedMesh(1).communicator(0)
    config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=mesh, compile=compile_)
    dd = DomainParallel(NVE(model, 4.0), config)
    dd.partition(Batch.from_atoms(atoms, dtype=torch.float32))
    dd.run(n_steps=warm_up)
    graphs, rebuilds = counters["stats"]["unique_graphs"], dd.model.domain.rebuilds
    dd.run(n_steps=steps)
    return (
        dd.gather(dd.batch).positions,
        counters["stats"]["unique_graphs"] - graphs,
        dd.model.domain.rebuilds - rebuilds,
    )


@pytest.mark.parametrize("name", MODELS)
def test_compiled_trajectory_has_no_recompiles_and_matches_eager(name: str) -> None:
    torch._dynamo.reset()
    model, atoms = _model_and_atoms(name)
    eager, _, _ = _trajectory(model, atoms.copy(), False, 10, 90)
    compiled, new_graphs, rebuilds = _trajectory(model, atoms.copy(), True, 10, 90)
    assert rebuilds > 5, "the neighbour list must be rebuilt while compiled"
    assert new_graphs == 0, f"{new_graphs} recompiles after warm-up"
    assert float((compiled - eager).abs().max()) < 1e-4


def test_compile_needs_a_cutoff_safe_model() -> None:
    model = SimpleMPNN(cutoff=4.5)
    model.model_config = dataclasses.replace(
        model.model_config, neighbor_config=NeighborConfig(4.5, accepts_skin_pairs=False)
    )
    with pytest.raises(ValueError, match="accepts_skin_pairs"):
        DomainParallel(NVE(model, 1.0), DomainConfig(cutoff=4.5, compile=True))
