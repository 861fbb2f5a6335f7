"""Energy and forces a system is built with are not trusted at the first step, unless the
caller says they are current."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase.build import bulk

from nvdd_plugins import AtomicData, Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import FIRE, NVE, BaseDynamics
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import lj_model


def _rattled_argon(placeholders: bool) -> Batch:
    """fcc Ar at rest, rattled 0.1 Å; with zero energy and forces as placeholders when asked
    (what scripts written for other systems build)."""
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True) * (3, 3, 3)
    atoms.rattle(0.1, seed=3)
    data = AtomicData.from_atoms(atoms)
    data.add_node_property("velocities", torch.zeros_like(data.positions))
    if placeholders:
        data.add_node_property("forces", torch.zeros_like(data.positions))
        data.add_system_property("energy", torch.zeros(1, dtype=torch.float64))
    return Batch.from_data_list([data])


def _dynamics(name: str) -> BaseDynamics:
    return NVE(lj_model(), dt=4.0) if name == "nve" else FIRE(lj_model(), dt=4.0)


@pytest.mark.parametrize("name", ["nve", "fire"])
def test_zero_placeholder_forces_are_evaluated_at_the_first_step(name: str) -> None:
    runs = {}
    for placeholders in (False, True):
        batch = _rattled_argon(placeholders)
        start = batch.positions.clone()
        _dynamics(name).run(batch, 2)
        runs[placeholders] = (start, batch.positions)
    start, reference = runs[False]
    assert float((reference - start).abs().max()) > 1e-3  # the atoms do move
    assert torch.equal(runs[True][1], reference)


class _Counting:
    """An evaluator that counts the model evaluations it forwards."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, 0
        self.uses_batch_neighbors = inner.uses_batch_neighbors

    def __call__(self, batch, properties):
        self.calls += 1
        return self.inner(batch, properties)

    def compute_view(self, batch):
        return self.inner.compute_view(batch)


def test_forces_current_trusts_the_given_values() -> None:
    computed = _rattled_argon(placeholders=False)
    NVE(lj_model(), dt=4.0).prepare(computed)  # the model's energy and forces at step 0
    runs = {}
    for forces_current in (False, True):
        batch = _rattled_argon(placeholders=False)
        batch.forces, batch.energy = computed.forces.clone(), computed.energy.clone()
        dynamics = NVE(lj_model(), dt=4.0)
        dynamics.evaluator = counting = _Counting(dynamics.evaluator)
        dynamics.run(batch, 3, forces_current=forces_current)
        runs[forces_current] = (batch.positions, counting.calls)
    assert torch.equal(runs[True][0], runs[False][0])
    assert (runs[False][1], runs[True][1]) == (4, 3)
    with pytest.raises(ValueError, match="no \\['energy', 'forces'\\] to trust"):
        NVE(lj_model(), dt=4.0).run(_rattled_argon(placeholders=False), 1, forces_current=True)


def test_a_second_run_reuses_the_forces_it_computed() -> None:
    batch = _rattled_argon(placeholders=False)
    dynamics = NVE(lj_model(), dt=4.0)
    dynamics.evaluator = counting = _Counting(dynamics.evaluator)
    dynamics.run(batch, 2)
    dynamics.run(batch, 2)
    assert counting.calls == 5  # one at the start, one per step


def test_domain_parallel_evaluates_placeholders_at_the_first_step() -> None:
    reference = _rattled_argon(placeholders=False)
    on_the_oracle(NVE(lj_model(), dt=4.0)).run(reference, 2)

    def run(comm) -> np.ndarray:
        model = lj_model()
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        with DomainParallel(NVE(model, dt=4.0), config, n_steps=2) as dd:
            dd.partition(_rattled_argon(placeholders=True) if comm.rank == 0 else None)
            dd.run()
            return dd.gather(dd.batch).positions

    for positions in run_simulated(2, run):
        assert float((positions - reference.positions).abs().max()) < 1e-8
