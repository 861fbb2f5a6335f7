"""The heat flux along trajectories: on an open cluster it is the time derivative of the
energy moment sum_i r_i e_i (a check independent of the formula), which the per-atom virial
form fails for a multi-layer MPNN; `HeatFluxLogger` under `DomainParallel` records the same
series as in one process."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase.md.velocitydistribution import Stationary, thermalize_momenta

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.dynamics import NVE, HeatFluxLogger
from nvdd_plugins.models import BaseModelMixin, evaluate_model, heat_flux_parts
from tests.helpers.systems import cluster, hot_bulk, lj_model, mpnn_model

STEPS = 24
SERIES_TOL = 1e-10  # relative to the largest component


def _open_cluster() -> Batch:
    """`cluster` at 60 K without net momentum, inside a 30 Å box that is not periodic (the
    box gives the per-atom virials a volume to be divided by)."""
    atoms = cluster()
    atoms.positions += 10.0
    atoms.set_cell([30.0, 30.0, 30.0])
    thermalize_momenta(atoms, temperature_K=60, rng=np.random.default_rng(0))
    Stationary(atoms)
    return Batch.from_atoms(atoms)


def _virial_form(model: BaseModelMixin, batch: Batch, energies: torch.Tensor) -> torch.Tensor:
    """J from per-atom virials S_i (LAMMPS's `compute heat/flux` on `stress/atom`):
    sum_i e_i v_i - sum_i S_i v_i, eV Å/fs."""
    volume = float(batch.cell[0].det())
    virials = evaluate_model(model, batch, ("energy", "forces", "stresses"))["stresses"] * volume
    convective, potential = heat_flux_parts(
        energies, batch.atomic_masses, batch.velocities, -virials
    )
    return convective + potential


def _moment_check(dt: float) -> tuple[float, float]:
    """Largest deviation of nvdd's J and of the virial form from the central difference of
    sum_i r_i (U_i + m_i v_i^2 / 2) along NVE of the 3-layer MPNN, relative to the largest
    component of the potential part."""
    model, batch = mpnn_model(), _open_cluster()
    dynamics, logger = NVE(model, dt), HeatFluxLogger()
    dynamics.attach(logger)
    moments, virial = [], []
    for _ in range(STEPS):
        dynamics.step(batch)
        energies = dynamics.results["energies"]
        kinetic = 0.5 * batch.atomic_masses * (batch.velocities**2).sum(-1)
        moments.append((batch.positions * (energies + kinetic).unsqueeze(1)).sum(0))
        virial.append(_virial_form(model, batch, energies))
    series = logger.series()
    moment = torch.stack(moments)
    derivative = (moment[2:] - moment[:-2]) / (2 * dt)  # eV Å/fs
    scale = float(series["potential"].abs().max())
    nvdd = float((series["total"][1:-1] - derivative).abs().max()) / scale
    pairs = float((torch.stack(virial)[1:-1] - derivative).abs().max()) / scale
    return nvdd, pairs


def test_flux_is_the_time_derivative_of_the_energy_moment() -> None:
    """nvdd's J passes to the integration error (second order in the step: halving it cuts
    the deviation four-fold); the virial form misses the terms through the MPNN's layers,
    which no step size removes."""
    (coarse, virial_coarse), (fine, virial_fine) = _moment_check(2.0), _moment_check(1.0)
    print(
        f"deviation / |J_pot|: nvdd {coarse:.1e} (dt 2 fs), {fine:.1e} (dt 1 fs); "
        f"virial form {virial_coarse:.1e}, {virial_fine:.1e}: {virial_fine / fine:.0f} x nvdd's"
    )
    assert fine < 1e-4
    assert 3.0 < coarse / fine < 5.0
    assert virial_fine > 100 * fine
    assert virial_fine > 0.5 * virial_coarse


def _one_process(model: BaseModelMixin, full: Batch) -> dict[str, torch.Tensor]:
    dynamics, logger = NVE(model, 2.0, skin=0.5), HeatFluxLogger()
    dynamics.attach(logger)
    dynamics.run(full.copy(), STEPS)
    return logger.series()


def _domain_parallel(
    comm: Communicator, model: BaseModelMixin, full: Batch
) -> dict[str, torch.Tensor]:
    logger = HeatFluxLogger()
    config = DomainConfig(model.cutoff, 0.5, comm)
    with DomainParallel(NVE(model, 2.0), config, STEPS, hooks=[logger]) as dd:
        dd.partition(full.copy() if comm.rank == 0 else None)
        dd.run()
        assert dd.sums.reductions > 0
    return logger.series()


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("factory", [lj_model, mpnn_model], ids=["lj", "mpnn"])
def test_logger_under_domain_parallel_matches_one_process(factory, world_size: int) -> None:
    """A hot periodic triclinic box (atoms migrate and cross periodic faces)."""
    model, full = factory(), hot_bulk()
    expected = _one_process(model, full)
    scale = float(expected["total"].abs().max())
    for series in run_simulated(world_size, lambda comm: _domain_parallel(comm, model, full)):
        for part in ("convective", "potential"):
            error = float((series[part] - expected[part]).abs().max()) / scale
            assert error < SERIES_TOL, (part, error)
        assert torch.equal(series["time"], expected["time"])
    assert expected["time"].shape == (STEPS,)
    assert float(expected["time"][-1]) == pytest.approx(STEPS * 2.0)
