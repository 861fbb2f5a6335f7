"""MACEWrapper.prepare_for_compile: mace's preparation patches torch.nn.Module.__call__ for
the whole process while it runs, so simulated ranks (threads) building compiled runs must
share one preparation, and the shared copy must follow the wrapper's weights."""

from __future__ import annotations

import sys

import pytest
import torch
from ase.build import bulk

pytest.importorskip("mace")

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import SimulatedCommunicator, run_simulated
from nvdd_plugins.models import MACEArchitecture, MACEWrapper, evaluate_model, random_mace

pytestmark = pytest.mark.mace


def _small_mace(seed: int = 0) -> MACEWrapper:
    return MACEWrapper(random_mace([18], architecture=MACEArchitecture(max_ell=1), seed=seed))


def test_simulated_ranks_building_compiled_mace_share_one_preparation() -> None:
    wrapper = _small_mace()

    def rank(comm: SimulatedCommunicator) -> MACEWrapper:
        config = DomainConfig(cutoff=wrapper.cutoff, mesh=comm, compile=True)
        return ReplicatedModel(wrapper, config).engine.model

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch every few bytecodes: a race shows every time
    try:
        prepared = run_simulated(4, rank, timeout=60)
    finally:
        sys.setswitchinterval(switch)
    assert all(model is prepared[0] for model in prepared)
    assert prepared[0] is not wrapper and prepared[0].prepare_for_compile() is prepared[0]
    torch.fx.symbolic_trace(torch.nn.Linear(2, 2))  # the process is not left patched


def _energy(model: MACEWrapper) -> float:
    atoms = bulk("Ar", "fcc", a=5.26) * (2, 2, 2)
    atoms.rattle(0.1, seed=0)
    return float(evaluate_model(model, Batch.from_atoms(atoms), ("energy",))["energy"])


def test_the_prepared_copy_follows_the_weights() -> None:
    wrapper = _small_mace()
    first = wrapper.prepare_for_compile()
    assert wrapper.prepare_for_compile() is first
    with torch.no_grad():
        next(wrapper.model.interactions.parameters()).mul_(3.0)
    changed = wrapper.prepare_for_compile()
    assert changed is not first
    energy = _energy(wrapper)
    assert abs(_energy(changed) - energy) < 1e-8  # rounding: mace's prepared code path
    assert abs(_energy(first) - energy) > 1e-4
    wrapper.float()
    assert next(wrapper.prepare_for_compile().parameters()).dtype == torch.float32
