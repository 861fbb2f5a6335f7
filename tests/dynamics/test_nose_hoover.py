"""`NoseHoover` single-process: ASE's `NoseHooverChainNVT` trajectory, its conserved energy
and the carried kinetic energy's guard."""

from __future__ import annotations

import ase.units
import pytest
from ase.md.nose_hoover_chain import NoseHooverChainNVT

from nvdd_plugins import Batch
from nvdd_plugins.dynamics import DynamicsStage, NoseHoover
from tests.helpers.ase_reference import ase_lj, deviation, warm_bulk
from tests.helpers.systems import lj_model

DT, TEMPERATURE, TDAMP = 4.0, 150.0, 100.0


def test_matches_ase_nose_hoover_chain() -> None:
    atoms = warm_bulk()
    batch = Batch.from_atoms(atoms)
    reference = ase_lj(atoms)
    ase_md = NoseHooverChainNVT(
        reference, DT * ase.units.fs, TEMPERATURE, TDAMP * ase.units.fs, tchain=3, tloop=2
    )
    dynamics = NoseHoover(lj_model(), DT, TEMPERATURE, TDAMP, tchain=3, tloop=2, skin=0.5)
    ase_md.run(200)
    dynamics.run(batch, 200)
    errors = deviation(batch, reference)
    # rounding only (ASE's LJ and ours agree to ~1e-13 eV/Å): ~1e-14 reached
    assert errors["positions"] < 1e-10 and errors["velocities"] < 1e-12, errors
    chain = ase_md._thermostat
    assert dynamics.thermostat.p_eta == pytest.approx(list(chain._p_eta), rel=1e-10, abs=1e-14)
    assert dynamics.thermostat.eta == pytest.approx(list(chain._eta), rel=1e-10, abs=1e-14)


def test_conserved_energy_and_temperature() -> None:
    batch = Batch.from_atoms(warm_bulk(600.0))
    dynamics = NoseHoover(lj_model(), DT, TEMPERATURE, TDAMP, skin=0.5)
    dynamics.prepare(batch)
    start = dynamics.conserved_energy(batch)
    dynamics.run(batch, 300)
    drift = abs(dynamics.conserved_energy(batch) - start) / batch.num_nodes
    assert drift < 1e-5, drift
    mv2 = float((batch.atomic_masses * batch.velocities.square().sum(-1)).sum())
    temperature = mv2 / (3 * batch.num_nodes * ase.units.kB)
    assert temperature < 450.0, "the thermostat pulls 600 K towards 150 K"


class _HeatUp:
    stage = DynamicsStage.BEFORE_STEP
    frequency = 1

    def __call__(self, ctx, stage) -> None:
        if ctx.step == 3:
            ctx.batch.velocities = 1.1 * ctx.batch.velocities


def test_velocities_changed_between_steps_are_caught() -> None:
    with pytest.raises(RuntimeError, match=r"velocities changed between steps.*forget_globals"):
        NoseHoover(lj_model(), DT, TEMPERATURE, TDAMP, hooks=[_HeatUp()]).run(
            Batch.from_atoms(warm_bulk()), 5
        )

    class _HeatUpAndSay(_HeatUp):
        def __call__(self, ctx, stage) -> None:
            super().__call__(ctx, stage)
            ctx.dynamics.forget_globals()

    dynamics = NoseHoover(lj_model(), DT, TEMPERATURE, TDAMP, hooks=[_HeatUpAndSay()])
    dynamics.run(Batch.from_atoms(warm_bulk()), 5)
    assert dynamics.step_count == 5


def test_state_dict_round_trip_continues_identically() -> None:
    straight, batch = NoseHoover(lj_model(), DT, TEMPERATURE, TDAMP), Batch.from_atoms(warm_bulk())
    straight.run(batch, 20)
    first, resumed = NoseHoover(lj_model(), DT, TEMPERATURE, TDAMP), Batch.from_atoms(warm_bulk())
    first.run(resumed, 10)
    second = NoseHoover(lj_model(), DT, TEMPERATURE, TDAMP)
    second.load_state_dict(first.state_dict())
    second.run(resumed, 10)
    assert float((resumed.positions - batch.positions).abs().max()) < 1e-12
    assert second.thermostat.p_eta == pytest.approx(straight.thermostat.p_eta, rel=1e-12)
