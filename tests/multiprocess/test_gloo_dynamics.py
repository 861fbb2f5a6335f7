"""DomainParallel trajectories across real gloo ranks equal the single-process ones."""

from __future__ import annotations

import time

import pytest
import torch

from nvdd_plugins import DomainConfig, DomainParallel, HookScope
from nvdd_plugins.comm import Communicator, SimulatedMesh
from nvdd_plugins.dynamics import NVE, BaseDynamics, DynamicsStage
from tests.helpers.multiprocess import RankFailed, run_gloo
from tests.helpers.systems import MD_DT_FS, MD_SKIN, hot_bulk, lj_model, md_integrator, mpnn_model

pytestmark = pytest.mark.multiprocess

N_STEPS = 100
DT_FS, SKIN = MD_DT_FS, MD_SKIN
MODELS = {"lj": lj_model, "mpnn": mpnn_model}


class _TrajectoryCheck:
    """GLOBAL hook: every step, the gathered system holds each atom exactly once and matches
    the single-process trajectory."""

    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.GLOBAL
    frequency = 1

    def __init__(self, reference: torch.Tensor, masses: torch.Tensor) -> None:
        self.reference, self.masses = reference, masses
        self.max_error = 0.0
        self.steps = 0

    def __call__(self, ctx, stage) -> None:
        batch = ctx.batch
        n = self.reference.shape[1]
        assert torch.equal(batch.global_ids, torch.arange(n)), "an atom is lost or duplicated"
        assert torch.allclose(batch.atomic_masses.sum(), self.masses.sum())
        error = (batch.positions - self.reference[ctx.step - 1]).abs().max()
        self.max_error = max(self.max_error, float(error))
        self.steps += 1


def _reference_trajectories() -> dict[str, torch.Tensor]:
    trajectories = {}
    for model_name, factory in MODELS.items():
        for integrator in ("nve", "langevin"):
            dynamics, batch = md_integrator(integrator, factory()), hot_bulk()
            frames = []
            for _ in range(N_STEPS):
                dynamics.step(batch)
                frames.append(batch.positions.clone())
            trajectories[f"{model_name}/{integrator}"] = torch.stack(frames)
    return trajectories


@pytest.fixture(scope="module")
def references() -> dict[str, torch.Tensor]:
    return _reference_trajectories()


def _distributed_runs(comm: Communicator, references: dict[str, torch.Tensor]) -> dict:
    report = {}
    for label, reference in references.items():
        model_name, integrator = label.split("/")
        model = MODELS[model_name]()
        full = hot_bulk()
        check = _TrajectoryCheck(reference, full.atomic_masses)
        config = DomainConfig(cutoff=model.cutoff, skin=SKIN, mesh=comm)
        with DomainParallel(md_integrator(integrator, model), config, N_STEPS, hooks=[check]) as dd:
            dd.partition(full if comm.rank == 0 else None)
            dd.run()
            migrated = int(comm.all_reduce(torch.tensor([dd.model.domain.migrated]))[0])
        report[label] = (check.max_error, check.steps, migrated)
    return report


# 4 real ranks in CI: test_custom_integrator_with_global_hook_is_rank_independent (a 60-step
# trajectory against one process) and the torture suite's gloo cases
@pytest.mark.parametrize("world_size", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_trajectories_match_single_process(world_size, references) -> None:
    frac = references["lj/nve"] @ torch.linalg.inv(hot_bulk().cell[0])
    wraps = int((torch.floor(frac[1:]) != torch.floor(frac[:-1])).any(-1).sum())
    assert wraps > 20, "the test system must cross periodic boundaries"
    reports = run_gloo(world_size, _distributed_runs, references, timeout=400)
    for rank, report in enumerate(reports):
        for label, (max_error, steps, migrated) in report.items():
            assert steps == N_STEPS, (rank, label)
            assert max_error < 1e-8, (rank, label, max_error)
            assert migrated > 20, (rank, label, "atoms must migrate between ranks")


class _RescalingIntegrator(BaseDynamics):
    """A custom integrator: velocity Verlet plus velocity rescaling to a target kinetic
    energy, from a global kinetic energy supplied by a GLOBAL hook (seed §4)."""

    required_fields = ("positions", "atomic_numbers", "atomic_masses", "velocities")

    def __init__(self, model, dt, target_ke):
        super().__init__(model, dt, skin=SKIN)
        self.target_ke = target_ke
        self.global_ke = None

    def pre_update(self, batch):
        scale = (self.target_ke / self.global_ke) ** 0.5 if self.global_ke else 1.0
        dt = self.dt_internal
        velocities = (
            scale * batch.velocities + 0.5 * dt * batch.forces / batch.atomic_masses[:, None]
        )
        batch.velocities = velocities
        batch.positions = batch.positions + dt * velocities

    def post_update(self, batch):
        batch.velocities = (
            batch.velocities + 0.5 * self.dt_internal * batch.forces / batch.atomic_masses[:, None]
        )


class _GlobalKineticEnergyHook:
    stage = DynamicsStage.BEFORE_STEP
    scope = HookScope.GLOBAL
    frequency = 1

    def __init__(self, integrator):
        self._integrator = integrator

    def __call__(self, ctx, stage):
        b = ctx.batch
        self._integrator.global_ke = float(
            0.5 * (b.atomic_masses * (b.velocities**2).sum(-1)).sum()
        )


def _custom_run(comm: Communicator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Final positions gathered to every rank, and to rank 0 only (None elsewhere)."""
    model = lj_model()
    integrator = _RescalingIntegrator(model, DT_FS, target_ke=3.0)
    config = DomainConfig(cutoff=model.cutoff, skin=SKIN, mesh=comm)
    with DomainParallel(integrator, config, 60, hooks=[_GlobalKineticEnergyHook(integrator)]) as dd:
        dd.partition(hot_bulk() if comm.rank == 0 else None)
        dd.run()
        at_root = dd.gather(dd.batch, dst=0)
        return dd.gather(dd.batch).positions, None if at_root is None else at_root.positions


def test_custom_integrator_with_global_hook_is_rank_independent() -> None:
    one, _ = _custom_run(SimulatedMesh(1).communicator(0))
    for world_size in (2, 4):
        results = run_gloo(world_size, _custom_run, timeout=200)
        for rank, (positions, at_root) in enumerate(results):
            assert float((positions - one).abs().max()) < 1e-10
            assert (at_root is None) == (rank != 0)
        assert torch.equal(results[0][1], results[0][0])


class _Explode:
    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.LOCAL
    frequency = 1

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __call__(self, ctx, stage):
        if self.rank == 1 and ctx.step == 3:
            raise ValueError("rank 1 exploded at step 3")


def _exploding_run(comm: Communicator) -> None:
    model = lj_model()
    config = DomainConfig(cutoff=model.cutoff, skin=SKIN, mesh=comm)
    with DomainParallel(NVE(model, DT_FS), config, 50, hooks=[_Explode(comm.rank)]) as dd:
        dd.partition(hot_bulk() if comm.rank == 0 else None)
        dd.run()


def test_one_rank_raising_ends_all_ranks_with_its_message() -> None:
    start = time.monotonic()
    with pytest.raises(
        RankFailed, match=r"(?s)--- rank1 ---\n.*rank 1 exploded at step 3"
    ) as failure:
        run_gloo(2, _exploding_run, timeout=30)
    assert str(failure.value).index("rank1") < str(failure.value).index("rank0")
    assert time.monotonic() - start < 30
