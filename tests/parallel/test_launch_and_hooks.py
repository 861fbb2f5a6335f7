"""Launch environments and hook scopes: what a user gets wrong gets a message, not silence."""

from __future__ import annotations

import io
import logging
import os

import numpy as np
import pytest
import torch
from ase.md.velocitydistribution import thermalize_momenta

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel, HookScope
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.comm.launch import LaunchInfo, detect_launch, slurm_first_host
from nvdd_plugins.comm.resolve import resolve_communicator
from nvdd_plugins.dynamics import NVE, DynamicsStage, NeighborListHook, ThermoLogger
from tests.helpers.oracle import on_the_oracle
from tests.helpers.systems import lj_model, triclinic_bulk


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("gpu[003-005,9],cpu1", "gpu003"),
        ("nodeA,nodeB", "nodeA"),
        ("single", "single"),
        ("rack-2[17]", "rack-217"),
    ],
)
def test_slurm_first_host(nodelist: str, host: str) -> None:
    assert slurm_first_host(nodelist) == host


def test_slurm_master_address_comes_from_the_node_list(monkeypatch) -> None:
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
    for name in names:
        monkeypatch.setenv(name, "")  # recorded, so the teardown restores the original
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[012-013]")
    info = detect_launch()
    assert info == LaunchInfo(3, 8, 1, "slurm")
    assert DistributedManager._init_method(info) == "env://"
    assert os.environ["MASTER_ADDR"] == "gpu012"


def test_one_rank_mesh_in_a_multi_process_launch_is_reported(monkeypatch, caplog) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.WARNING):
        comm = resolve_communicator(None)
    assert comm.size == 1
    assert "every process computes the whole system alone" in caplog.text


class _HalveVelocities:
    """A GLOBAL hook that (wrongly) writes to the gathered system."""

    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.GLOBAL
    frequency = 1

    def __call__(self, ctx, stage) -> None:
        ctx.batch.velocities.mul_(0.5)


def test_writes_to_a_gathered_batch_are_refused() -> None:
    atoms = triclinic_bulk()
    thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(0))

    def run(comm):
        model = lj_model()
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        with DomainParallel(NVE(model, 2.0), config, 3, hooks=[_HalveVelocities()]) as dd:
            dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
            dd.run()

    with pytest.raises(RuntimeError, match=r"_HalveVelocities \(GLOBAL scope\) changed ctx.batch"):
        run_simulated(2, run, timeout=60)


def _hot_atoms():
    atoms = triclinic_bulk()
    thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(0))
    return atoms


def test_outer_hooks_attach_with_interval_and_scope() -> None:
    atoms = _hot_atoms()

    def run(comm):
        whole, own = [], []

        def on_whole(ctx, stage) -> None:
            whole.append((ctx.step, ctx.batch.num_nodes))

        def on_own(ctx, stage) -> None:
            own.append((ctx.step, torch.equal(ctx.batch.global_ids, dd.batch.global_ids)))

        model, stream = lj_model(), io.StringIO()
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        logger = ThermoLogger(frequency=2, stream=stream)
        with DomainParallel(NVE(model, 2.0), config, 4, hooks=[logger]) as dd:
            dd.attach(on_whole, 2, DynamicsStage.AFTER_STEP, HookScope.GLOBAL)
            dd.attach(on_own, interval=3, stage=DynamicsStage.BEFORE_STEP)
            dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
            dd.run()
        return whole, own, len(stream.getvalue().splitlines())

    n = len(atoms)
    reports = run_simulated(2, run, timeout=60)
    for whole, own, _ in reports:
        assert whole == [(2, n), (4, n)] and own == [(0, True), (3, True)]
    # header and steps 0, 2, 4
    assert [lines for *_, lines in reports] == [4, 0], "ThermoLogger prints on rank 0 only"


def test_neighbor_list_hook_leaves_the_compute_view_list_alone() -> None:
    atoms = _hot_atoms()

    def run(comm, with_hook: bool):
        edges = []

        def record(ctx, stage) -> None:
            edges.append(ctx.batch.edge_index.clone())

        model = lj_model()
        inner = NVE(model, 2.0, hooks=[NeighborListHook(model.cutoff, 0.3)] if with_hook else [])
        inner.attach(record, stage=DynamicsStage.BEFORE_COMPUTE)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        with DomainParallel(inner, config, 3) as dd:
            dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
            dd.run()
        return edges

    plain = run_simulated(2, lambda comm: run(comm, False), timeout=60)
    hooked = run_simulated(2, lambda comm: run(comm, True), timeout=60)
    for without, with_ in zip(plain, hooked, strict=True):
        assert len(without) == len(with_) == 4
        assert all(torch.equal(a, b) for a, b in zip(without, with_, strict=True))


def test_a_collective_hook_on_one_rank_only_is_named_on_every_rank() -> None:
    """A gathering hook, or a compute-stage hook of the inner integrator, attached on rank 0
    only would leave rank 1 waiting in a collective: run() refuses it on every rank, naming
    the hook. A LOCAL hook on one rank is fine."""
    atoms = _hot_atoms()

    def run(comm, where: str) -> str:
        model = lj_model()
        inner = NVE(model, 2.0)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        with DomainParallel(inner, config, 2) as dd:
            if comm.rank == 0:
                if where == "outer":
                    dd.attach(ThermoLogger(frequency=1, stream=io.StringIO()))
                elif where == "inner":
                    inner.attach(lambda ctx, stage: None, stage=DynamicsStage.AFTER_COMPUTE)
                else:
                    dd.attach(lambda ctx, stage: None, stage=DynamicsStage.AFTER_STEP)
            dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
            try:
                dd.run()
            except ValueError as err:
                return str(err)
        return "ran"

    for where, hook in (("outer", "ThermoLogger at AFTER_STEP"), ("inner", "function on the")):
        for message in run_simulated(2, lambda comm, w=where: run(comm, w), timeout=30):
            assert "hooks differ between ranks: rank 0 has" in message, message
            assert hook in message and "rank 1 does not" in message, message
    assert run_simulated(2, lambda comm: run(comm, "local"), timeout=30) == ["ran", "ran"]


def test_only_failures_of_some_ranks_are_noted_for_cleanup(tmp_path) -> None:
    """An error every rank raises alike (a missing checkpoint) leaves the ranks in step, so
    cleanup() may meet them at its barrier; an exception of one rank is noted for its
    communicator, and cleanup() and every later collective call then end the job instead
    (on simulated ranks: a RuntimeError naming the call and the failure)."""
    from nvdd_plugins.parallel.failures import noted_failure

    def dd_of(comm) -> DomainParallel:
        model = lj_model()
        return DomainParallel(NVE(model, 2.0), DomainConfig(cutoff=model.cutoff, mesh=comm), 2)

    def restore(comm) -> str | None:
        with pytest.raises(FileNotFoundError):
            dd_of(comm).restore_checkpoint(tmp_path / "absent.pt")
        return noted_failure(comm)

    def fail_on_rank_1(ctx, stage) -> None:
        if ctx.dynamics.evaluator.comm.rank == 1:
            raise RuntimeError("rank 1 failed on purpose")

    def run(comm) -> tuple[str | None, str]:
        dd = dd_of(comm)
        dd.attach(fail_on_rank_1, stage=DynamicsStage.AFTER_STEP)
        dd.partition(Batch.from_atoms(_hot_atoms()) if comm.rank == 0 else None)
        if comm.rank == 0:  # waits for rank 1 in step 2, until rank 1 ends the "job"
            with pytest.raises(RuntimeError, match="another rank failed"):
                dd.run()
            return None, ""
        with pytest.raises(RuntimeError, match="rank 1 failed on purpose"):
            dd.run()
        with pytest.raises(RuntimeError) as refused:
            dd.run()
        return noted_failure(comm), str(refused.value)

    assert run_simulated(2, restore, timeout=30) == [None, None]
    results = run_simulated(2, run, timeout=30)
    noted, refused = results[1]
    assert noted == "RuntimeError: rank 1 failed on purpose"
    assert refused.startswith("DomainParallel.run(): an earlier call on this rank ended with")
    assert "rank 1 failed on purpose" in refused


class _CountingCommunicator(Communicator):
    """A rank's communicator that counts the rows it receives from other ranks."""

    def __init__(self, inner: Communicator) -> None:
        self.inner, self.rank, self.size = inner, inner.rank, inner.size
        self.received = 0

    def exchange(self, sends, recv_counts, template):
        out = self.inner.exchange(sends, recv_counts, template)
        self.received += sum(int(t.shape[0]) for t in out.values())
        return out

    def all_gather(self, tensor):
        parts = self.inner.all_gather(tensor)
        self.received += sum(int(p.shape[0]) for q, p in enumerate(parts) if q != self.rank)
        return parts

    def all_reduce(self, tensor, op="sum"):
        return self.inner.all_reduce(tensor, op)

    def broadcast_object(self, obj, src=0):
        return self.inner.broadcast_object(obj, src)

    def barrier(self) -> None:
        self.inner.barrier()


@pytest.mark.parametrize("scope", [HookScope.RANK_ZERO, HookScope.GLOBAL])
def test_rank_zero_hooks_gather_to_rank_zero_only(scope: HookScope) -> None:
    atoms = _hot_atoms()
    reference = Batch.from_atoms(atoms)
    on_the_oracle(NVE(lj_model(), 2.0)).run(reference, 3)

    def run(comm, hooked: bool):
        seen = []
        counting = _CountingCommunicator(comm)
        model = lj_model()
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=counting)
        with DomainParallel(NVE(model, 2.0), config, 3) as dd:
            if hooked:
                record = lambda ctx, stage: seen.append(ctx.batch.positions)  # noqa: E731
                dd.attach(record, stage=DynamicsStage.AFTER_STEP, scope=scope)
            dd.partition(Batch.from_atoms(atoms) if comm.rank == 0 else None)
            counting.received = 0
            dd.run()
        return counting.received, seen

    plain = run_simulated(2, lambda comm: run(comm, False), timeout=60)
    hooked = run_simulated(2, lambda comm: run(comm, True), timeout=60)
    extra = [
        with_hook - without for (with_hook, _), (without, _) in zip(hooked, plain, strict=True)
    ]
    n = len(atoms)
    assert len(hooked[0][1]) == 3
    assert float((hooked[0][1][-1] - reference.positions).abs().max()) < 1e-8
    if scope is HookScope.RANK_ZERO:
        assert hooked[1][1] == [] and extra[1] < n, extra  # rank 1 receives no atoms
        assert extra[0] >= 3 * 4 * (n // 4), extra  # rank 0: rank 1's rows of each field
    else:  # the control: every rank receives the other's rows of every field
        assert len(hooked[1][1]) == 3 and min(extra) >= 3 * 4 * (n // 4), extra
