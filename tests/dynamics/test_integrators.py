"""Single-process integrators and hooks."""

from __future__ import annotations

import io

import ase.io
import ase.parallel
import ase.units
import numpy as np
import pytest
import torch
from ase.md.velocitydistribution import thermalize_momenta
from ase.md.verlet import VelocityVerlet

from nvdd_plugins import AtomicData, Batch
from nvdd_plugins.dynamics import (
    NVE,
    DynamicsStage,
    HookContext,
    NeighborListHook,
    NVTLangevin,
    ThermoLogger,
    TrajectoryWriter,
)
from nvdd_plugins.models import ModelEvaluator
from tests.helpers.ase_reference import ase_lj, warm_bulk
from tests.helpers.systems import lj_model, triclinic_bulk


def _system(temperature: float = 300.0) -> Batch:
    atoms = triclinic_bulk()
    thermalize_momenta(atoms, temperature_K=temperature, rng=np.random.default_rng(1))
    return Batch.from_atoms(atoms)


def _total_energy(batch: Batch) -> float:
    kinetic = 0.5 * (batch.atomic_masses * (batch.velocities**2).sum(-1)).sum()
    return float(batch.energy.sum() + kinetic)


def test_nve_conserves_energy() -> None:
    batch = _system()
    dynamics = NVE(lj_model(), dt=2.0, skin=0.5)
    dynamics.prepare(batch)
    start = _total_energy(batch)
    dynamics.run(batch, 100)
    assert abs(_total_energy(batch) - start) / batch.num_nodes < 2e-5


def test_verlet_skin_and_neighbor_hook_do_not_change_the_trajectory() -> None:
    runs = []
    for skin, hooks in ((0.0, []), (0.8, []), (0.0, [NeighborListHook(6.0, skin=0.8)])):
        batch = _system()
        NVE(lj_model(), dt=4.0, skin=skin, hooks=hooks).run(batch, 40)
        runs.append(batch.positions)
    assert float((runs[1] - runs[0]).abs().max()) < 1e-10
    assert float((runs[2] - runs[0]).abs().max()) < 1e-10


def test_langevin_is_reproducible_and_seeded() -> None:
    results = []
    for seed in (1, 1, 2):
        batch = _system()
        NVTLangevin(lj_model(), 4.0, temperature=300, friction=0.05, seed=seed).run(batch, 10)
        results.append(batch.positions)
    assert torch.equal(results[0], results[1])
    assert not torch.allclose(results[0], results[2])


def test_missing_velocities_raise_a_clear_error() -> None:
    data = AtomicData(
        positions=torch.zeros(2, 3, dtype=torch.float64)
        + torch.tensor([[0.0], [3.0]], dtype=torch.float64),
        atomic_numbers=torch.tensor([18, 18]),
        atomic_masses=torch.tensor([39.9, 39.9], dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="velocities"):
        NVE(lj_model(), 1.0).step(Batch.from_data_list([data]))


def test_hooks_fire_at_their_stage_and_frequency() -> None:
    calls = []

    class Recorder:
        def __init__(self, stage, frequency):
            self.stage, self.frequency = stage, frequency

        def __call__(self, ctx, stage):
            calls.append((stage, ctx.step))

    hooks = [Recorder(DynamicsStage.BEFORE_STEP, 2), Recorder(DynamicsStage.AFTER_COMPUTE, 3)]
    NVE(lj_model(), 1.0, hooks=hooks).run(_system(), 4)
    before = [s for stage, s in calls if stage is DynamicsStage.BEFORE_STEP]
    compute = [s for stage, s in calls if stage is DynamicsStage.AFTER_COMPUTE]
    assert before == [0, 2] and compute == [0, 0, 3]


def test_attach_registers_any_callable_and_reads_frequency_once() -> None:
    calls = []

    class Recorder:
        stage, frequency = DynamicsStage.AFTER_STEP, 2

        def __call__(self, ctx, stage):
            calls.append(("recorder", ctx.step))

    def plain(ctx: HookContext, stage: DynamicsStage) -> None:
        calls.append(("plain", ctx.step))

    dynamics = NVE(lj_model(), 1.0)
    recorder = Recorder()
    dynamics.attach(recorder)
    dynamics.attach(plain, interval=3, stage=DynamicsStage.AFTER_STEP)
    recorder.frequency = 1  # read when attached, not at every step
    dynamics.run(_system(), 6)
    expected = [("recorder", 2), ("plain", 3), ("recorder", 4), ("recorder", 6), ("plain", 6)]
    assert calls == expected


class _CountingEvaluator:
    """The single-process evaluator behind the `Evaluator` seam, counting its calls."""

    uses_batch_neighbors = True

    def __init__(self, evaluator: ModelEvaluator) -> None:
        self.evaluator, self.calls, self.views = evaluator, 0, 0

    def __call__(self, batch, properties):
        self.calls += 1
        return self.evaluator(batch, properties)

    def compute_view(self, batch):
        self.views += 1
        return batch


def test_the_model_is_evaluated_through_the_injected_evaluator_only() -> None:
    seen = []

    def view_hook(ctx: HookContext, stage: DynamicsStage) -> None:
        seen.append(ctx.batch)

    reference = _system()
    NVE(lj_model(), 2.0, skin=0.5).run(reference, 5)
    dynamics = NVE(lj_model(), 2.0, skin=0.5)
    counting = _CountingEvaluator(dynamics.evaluator)
    dynamics.evaluator = counting
    dynamics.attach(view_hook, stage=DynamicsStage.AFTER_COMPUTE)
    batch = _system()
    dynamics.run(batch, 5)
    assert torch.equal(batch.positions, reference.positions)
    assert counting.calls == counting.views == 6  # the initial forces, then one per step
    assert all(view is batch for view in seen)


def test_thermo_logger_and_trajectory_writer_start_at_step_0_as_ase(tmp_path) -> None:
    """Like ASE's MDLogger and a trajectory attached to VelocityVerlet: the initial state,
    then every `frequency` steps; the same rows and frames as ASE's."""
    stream = io.StringIO()
    path = tmp_path / "run.extxyz"
    hooks = [ThermoLogger(frequency=5, stream=stream), TrajectoryWriter(path, frequency=5)]
    atoms = warm_bulk()
    batch = Batch.from_atoms(atoms)
    NVE(lj_model(), 2.0, hooks=hooks).run(batch, 10)
    header, *rows = stream.getvalue().splitlines()
    assert header.split()[:3] == ["step", "time[fs]", "Epot[eV]"]
    assert [int(row.split()[0]) for row in rows] == [0, 5, 10]
    frames = ase.io.read(path, index=":")
    assert np.allclose(frames[0].positions, atoms.positions)
    assert np.allclose(frames[-1].positions, batch.positions.numpy())
    assert np.allclose(frames[-1].get_forces(), batch.forces.numpy())

    reference = ase_lj(atoms)
    log, trajectory = tmp_path / "ase.log", tmp_path / "ase.traj"
    VelocityVerlet(
        reference, 2.0 * ase.units.fs, trajectory=str(trajectory), logfile=str(log), loginterval=5
    ).run(10)
    ase_rows = [line.split() for line in log.read_text().splitlines()[1:]]
    assert len(ase_rows) == len(rows) and len(ase.io.read(trajectory, index=":")) == len(frames)
    for row, theirs in zip(rows, ase_rows, strict=True):  # ASE: time[ps] Etot Epot Ekin T[K]
        step, _, epot, ekin, etot, kelvin = map(float, row.split())
        assert float(theirs[0]) == pytest.approx(step * 2e-3, abs=1e-4)
        # ASE prints 3 decimals
        assert [etot, epot, ekin] == pytest.approx(list(map(float, theirs[1:4])), abs=6e-4)
        assert kelvin == pytest.approx(float(theirs[4]), abs=0.1)


class _RankZeroOfTwo:
    """ASE's MPI world as rank 0 of two sees it; any collective fails, since under mpirun
    rank 1 would never join it (rank 1 does not run RANK_ZERO hooks)."""

    rank, size = 0, 2

    def __getattr__(self, name: str):
        raise AssertionError(f"an ASE MPI collective ({name}) on rank 0 alone")


@pytest.mark.parametrize("suffix", ["traj", "extxyz"])
def test_trajectory_writer_makes_no_ase_collective(tmp_path, monkeypatch, suffix: str) -> None:
    path, batch = tmp_path / f"run.{suffix}", _system()
    dynamics = NVE(lj_model(), 2.0, hooks=[TrajectoryWriter(path, frequency=5)])
    monkeypatch.setattr(ase.parallel.world, "comm", _RankZeroOfTwo())
    dynamics.run(batch, 10)
    monkeypatch.undo()
    frames = ase.io.read(path, index=":")
    assert len(frames) == 3 and np.allclose(frames[-1].positions, batch.positions.numpy())
    assert np.allclose(frames[-1].get_forces(), batch.forces.numpy())
