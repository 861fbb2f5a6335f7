"""A custom integrator's global quantity: a rank-local `.sum()` is wrong under
`DomainParallel`; the same quantity declared through `reduce_sums` is exact."""

from __future__ import annotations

import math

import ase.units
import torch

from nvdd_plugins.comm import run_simulated
from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics import NVE, kinetic_partials
from tests.helpers.ensembles import domain_parallel, max_deviation, single_process
from tests.helpers.systems import MD_DT_FS, MD_SKIN, hot_bulk

N_STEPS = 100


class _Rescaling(NVE):
    """Velocity Verlet, then Berendsen velocity rescaling towards 300 K (τ = 50 fs)."""

    def temperature(self, batch: Batch) -> float:
        raise NotImplementedError

    def post_update(self, batch: Batch) -> None:
        super().post_update(batch)
        ratio = 300.0 / self.temperature(batch)
        batch.velocities = batch.velocities * math.sqrt(1.0 + self.dt / 50.0 * (ratio - 1.0))


class LocalTemperature(_Rescaling):
    """The rule break: a temperature from this rank's atoms only."""

    def temperature(self, batch: Batch) -> float:
        sums = kinetic_partials(batch)  # not reduced: this rank's atoms only
        return float(sums["mv2"]) / (3 * float(sums["atoms"]) * ase.units.kB)


class DeclaredTemperature(_Rescaling):
    """The same temperature declared as partial sums: reduced over the mesh."""

    def temperature(self, batch: Batch) -> float:
        sums = self.reduce_sums(kinetic_partials(batch))
        return float(sums["mv2"]) / (3 * float(sums["atoms"]) * ase.units.kB)


def _runs(kind: type[_Rescaling]) -> tuple[dict, list[dict]]:
    def factory(model):
        return kind(model, MD_DT_FS, skin=MD_SKIN)

    reference = single_process(factory, hot_bulk, N_STEPS)
    distributed = run_simulated(
        2, lambda comm: domain_parallel(comm, factory, hot_bulk, N_STEPS), 120
    )
    return reference, distributed


def test_rank_local_sum_diverges_and_declared_sum_matches() -> None:
    local_reference, local_runs = _runs(LocalTemperature)
    declared_reference, declared_runs = _runs(DeclaredTemperature)
    # one process: the two are the same integrator
    assert torch.equal(local_reference["positions"], declared_reference["positions"])
    assert all(max_deviation(r, local_reference) > 1e-4 for r in local_runs)
    assert all(max_deviation(r, declared_reference) < 1e-8 for r in declared_runs)
    assert [r["reductions"] for r in declared_runs] == [N_STEPS, N_STEPS]
