"""`DomainParallel`: drive any `BaseDynamics` across the mesh, one sub-domain per rank."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from types import TracebackType

import torch

from nvdd_plugins.comm import Communicator, local_device, note_steps
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch, FieldLevel
from nvdd_plugins.distributed_model import DistributedModel, NonFiniteError
from nvdd_plugins.dynamics import (
    AttachedHook,
    BaseDynamics,
    DynamicsStage,
    Hook,
    HookContext,
    HookFunction,
    ThermoLogger,
    TrajectoryWriter,
)
from nvdd_plugins.errors import raised_on_every_rank
from nvdd_plugins.models import model_dtype
from nvdd_plugins.parallel.checkpoint import (
    CheckpointPath,
    restore_domain_checkpoint,
    save_domain_checkpoint,
)
from nvdd_plugins.parallel.failures import notes_failures
from nvdd_plugins.parallel.hook_schedule import HookScope, check_same_hooks, collective_hooks
from nvdd_plugins.parallel.mesh_sums import MeshSums

__all__ = ["DomainParallel", "HookScope"]

logger = logging.getLogger(__name__)


def _fingerprint(batch: Batch) -> list[tuple[str, int, int]]:
    """Each field's name, tensor identity and in-place version: any write changes it."""
    return [(name, id(value), value._version) for name, value in batch.fields()]


class DomainParallel:
    """Run `dynamics` domain-decomposed: each rank integrates its own atoms.

    The inner integrator is unchanged: its evaluator becomes a `DistributedModel`, so its
    compute-stage hooks see the rank's padded compute view, and its reducer becomes a
    `MeshSums`, so the global quantities it declares (`BaseDynamics.reduce_sums`) are summed
    over the mesh with one all-reduce per call. Outer hooks (see `attach`) run
    at BEFORE_STEP / AFTER_STEP / ON_CONVERGE with a `HookScope`.

    Args:
        dynamics: the integrator or optimizer.
        config: the `DomainConfig` (its mesh, or the manager's, is the communicator).
        n_steps: steps `run()` takes by default.
        hooks: outer hooks, attached with their own `stage`, `frequency` and `scope`.
    """

    def __init__(
        self,
        dynamics: BaseDynamics,
        config: DomainConfig,
        n_steps: int = 0,
        hooks: Sequence[Hook] = (),
    ) -> None:
        self.dynamics = dynamics
        self.config = config
        self.n_steps = int(n_steps)
        self.model = DistributedModel(dynamics.model, config, captured_steps=dynamics.capturable)
        self.comm: Communicator = self.model.comm
        dynamics.evaluator = self.model
        self.sums = MeshSums(self.comm)
        dynamics.reducer = self.sums
        self.batch: Batch | None = None
        self._hooks: list[tuple[AttachedHook, HookScope]] = []
        for hook in hooks:
            self.attach(hook)

    def attach(
        self,
        hook: HookFunction,
        interval: int | None = None,
        stage: DynamicsStage | None = None,
        scope: HookScope | None = None,
    ) -> None:
        """Call `hook(ctx, stage)` at `stage` (default: `hook.stage`) every `interval` steps
        (default: `hook.frequency`, else 1) with `ctx.batch` as `scope` says. The default
        scope is `hook.scope`, else RANK_ZERO for `ThermoLogger` and `TrajectoryWriter`
        (they report on the whole system), else LOCAL. The model outputs named in
        `hook.requires` are evaluated at every eager step (`BaseDynamics.ask_for`)."""
        if scope is None:
            reports = isinstance(hook, ThermoLogger | TrajectoryWriter)
            scope = getattr(hook, "scope", HookScope.RANK_ZERO if reports else HookScope.LOCAL)
        self._hooks.append((AttachedHook.of(hook, interval, stage), HookScope(scope)))
        self.dynamics.ask_for(getattr(hook, "requires", ()))

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> DomainParallel:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.batch = None

    # -- partition ------------------------------------------------------------------------
    @notes_failures
    def partition(self, full: Batch | None) -> Batch:
        """Distribute the full system held by rank 0 (None elsewhere); return this rank's
        owned atoms as a single-system `Batch` (with "global_ids") on this rank's device."""
        problem = self._check_full(full) if self.comm.rank == 0 else None
        problem = self.comm.broadcast_object(problem, src=0)
        if problem:
            raise raised_on_every_rank(ValueError(f"partition(): {problem}"))
        if self.comm.rank == 0:
            full = self._in_model_dtype(full)
            if "global_ids" not in full:
                full.add_node_property(
                    "global_ids", torch.arange(full.num_nodes, device=full.device)
                )
        self.model.setup(full)
        schema = None
        if self.comm.rank == 0:
            nodes = {k: (v.dtype, tuple(v.shape[1:])) for k, v in full.fields(FieldLevel.NODE)}
            system = {k: v for k, v in full.fields(FieldLevel.SYSTEM)}
            schema = (nodes, {k: v.cpu() for k, v in system.items()}, full.device.type)
        nodes, system, device = self.comm.broadcast_object(schema, src=0)
        device = local_device(device)
        owner, parts = None, {}
        if self.comm.rank == 0:
            owner = self.model.owners(full.positions, full.cell[0])
            parts = dict(full.fields(FieldLevel.NODE))
        received = self.comm.scatter_rows(parts, owner, nodes)
        fields = {name: value.to(device) for name, value in received.items()}
        n = fields["positions"].shape[0]
        self.batch = Batch(
            fields,
            {},
            {k: v.to(device) for k, v in system.items()},
            ptr=torch.tensor([0, n], device=device),
        )
        logger.info("rank %d owns %d atoms", self.comm.rank, n)
        return self.batch

    def _in_model_dtype(self, full: Batch) -> Batch:
        """A copy of `full` whose floating-point fields have the model's dtype (as the ASE
        calculator evaluates ASE's float64 Atoms with a float32 model)."""
        model = self.dynamics.model
        dtype = model_dtype(model) if isinstance(model, torch.nn.Module) else None
        if dtype is None or dtype == full.positions.dtype:
            return full.copy()
        logger.warning(
            "partition(): the system's floating-point fields are %s and the model computes "
            "in %s: the system is cast to %s (build it in %s, or convert the model with "
            "model.to(%s), to keep this from being needed)",
            full.positions.dtype,
            dtype,
            dtype,
            dtype,
            full.positions.dtype,
        )
        return full.to(dtype=dtype)

    def _check_full(self, full: Batch | None) -> str | None:
        """Why rank 0's full system cannot be partitioned, or None."""
        if full is None or full.num_graphs != 1:
            return "rank 0 must pass the full system as a single-system Batch"
        if full.num_nodes == 0:
            return "the system has no atoms"
        try:
            self.dynamics.check_fields(full)
        except ValueError as err:
            return str(err)
        return None

    # -- checkpoints ----------------------------------------------------------------------
    @notes_failures
    def save_checkpoint(self, path: CheckpointPath) -> None:
        """Write the run's state to one file on rank 0 (collective): the full system by global
        id, the integrator's `state_dict()` and the decomposition and neighbour-list state."""
        owned = self._owned(None)
        save_domain_checkpoint(path, owned, self.dynamics, self.model)

    @notes_failures
    def restore_checkpoint(
        self, path: CheckpointPath, device: torch.device | str | None = None
    ) -> Batch:
        """Resume a saved run instead of `partition()`, at any rank count (collective); at
        the saved rank count the run continues bit-identically. Returns this rank's owned
        atoms (on `device`, default the saved run's device type)."""
        self.batch = restore_domain_checkpoint(path, self.dynamics, self.model, device)
        return self.batch

    # -- stepping -------------------------------------------------------------------------
    @notes_failures
    def gather(self, batch: Batch, dst: int | None = None) -> Batch | None:
        """The full system, ordered by global id, assembled from every rank (collective): on
        every rank, or with `dst` on that rank only (the others get None and receive no
        atoms)."""
        nodes = dict(batch.fields(FieldLevel.NODE))
        fields = self.comm.gather_by_id(batch.global_ids, nodes, dst)
        if fields is None:
            return None
        system = dict(batch.fields(FieldLevel.SYSTEM))
        n = int(fields["global_ids"].shape[0])
        return Batch(fields, {}, system, torch.tensor([0, n], device=batch.device))

    def _fire(self, stage: DynamicsStage, batch: Batch) -> None:
        step = self.dynamics.step_count
        due = [(entry, scope) for entry, scope in self._hooks if entry.due(stage, step)]
        if not due:
            return
        scopes = {scope for _, scope in due}
        full = None
        gathered = bool(scopes & {HookScope.GLOBAL, HookScope.RANK_ZERO})
        if HookScope.GLOBAL in scopes:
            full = self.gather(batch)
        elif gathered:
            full = self.gather(batch, dst=0)
        failure = None
        try:
            for entry, scope in due:
                if scope is HookScope.RANK_ZERO and self.comm.rank != 0:
                    continue
                view = batch if scope is HookScope.LOCAL else full
                self._call(
                    entry,
                    scope,
                    HookContext(view, step, self.dynamics, self.dynamics.results),
                    stage,
                )
        except Exception as err:
            failure = err
        if gathered:  # the ranks met in the gather: they can agree on the outcome
            self._agree_on(failure, stage)
        elif failure is not None:
            raise failure

    def _call(
        self, entry: AttachedHook, scope: HookScope, ctx: HookContext, stage: DynamicsStage
    ) -> None:
        before = None if scope is HookScope.LOCAL else _fingerprint(ctx.batch)
        entry.hook(ctx, stage)
        if before is not None and _fingerprint(ctx.batch) != before:
            raise RuntimeError(
                f"{type(entry.hook).__name__} ({scope.name} scope) changed ctx.batch, a "
                "gathered copy of the system whose changes go nowhere: change atoms in a "
                "LOCAL hook (it gets this rank's own atoms), or keep global results on the "
                "hook or the integrator"
            )

    def _agree_on(self, failure: Exception | None, stage: DynamicsStage) -> None:
        """After hooks that ran between the same two collectives on every rank: when a hook
        raised on any rank, every rank raises (its own exception, or one naming the rank
        that failed), marked as raised on every rank, so the ranks stay in step. One small
        all-gather, and a broadcast only after a failure."""
        flags = self.comm.all_gather(torch.tensor([failure is not None]))
        failed = [rank for rank, flag in enumerate(flags) if bool(flag[0])]
        if not failed:
            return
        message = f"{type(failure).__name__}: {failure}" if failure is not None else None
        message = self.comm.broadcast_object(message, src=failed[0])
        if failure is None:
            failure = RuntimeError(
                f"a hook at {stage.name} of step {self.dynamics.step_count} raised on rank "
                f"{failed[0]} ({message}); every rank stops here"
            )
        raise raised_on_every_rank(failure)

    @notes_failures
    def step(self, batch: Batch | None = None) -> tuple[Batch, bool]:
        """One step of the inner dynamics on this rank's atoms, with the outer hooks; returns
        this rank's owned batch and whether the optimizer has converged mesh-wide (always
        False for an integrator)."""
        batch = self._owned(batch)
        note_steps(self.dynamics)  # its step count shows if a collective stalls
        try:
            self.dynamics.prepare(batch)
            self._fire(DynamicsStage.BEFORE_STEP, batch)
            self.dynamics.step(batch)
        except NonFiniteError as err:
            failure = NonFiniteError(f"step {self.dynamics.step_count}: {err}")
            raise raised_on_every_rank(failure) from None
        self._fire(DynamicsStage.AFTER_STEP, batch)
        return batch, self.converged(batch)

    @notes_failures
    def run(
        self, batch: Batch | None = None, n_steps: int | None = None, forces_current: bool = False
    ) -> Batch:
        """`n_steps` steps (default: the constructor's); stops early on mesh-wide
        convergence. Returns this rank's owned batch.

        Steps between neighbour-list rebuilds are replayed as a CUDA graph where
        `DomainConfig.cuda_graphs` allows (docs/cuda_graphs.md). The first step evaluates
        the model, unless the batch carries forces the integrator
        computed (a previous `run`, a restored checkpoint) or `forces_current=True` says the
        energy and forces the system was built with are current for its positions
        (`BaseDynamics.mark_forces_current`).
        """
        batch = self._owned(batch)
        check_same_hooks(self.comm, collective_hooks(self._hooks, self.dynamics.hooks))
        if forces_current:
            self.dynamics.mark_forces_current(batch)
        steps = self.n_steps if n_steps is None else int(n_steps)
        start = time.perf_counter()
        outer = [entry for entry, _ in self._hooks]
        done = 0
        while done < steps:
            done += self.dynamics.replayed_steps(batch, steps - done, outer)
            if done == steps:
                break
            _, converged = self.step(batch)
            done += 1
            if converged:
                self._fire(DynamicsStage.ON_CONVERGE, batch)
                break
        try:
            self.model.check_finite(batch)  # the last step's forces are checked nowhere else
        except NonFiniteError as err:
            failure = NonFiniteError(f"after step {self.dynamics.step_count}: {err}")
            raise raised_on_every_rank(failure) from None
        elapsed, rebuilds = time.perf_counter() - start, self.model.rebuilds
        logger.info(
            "rank %d: %d steps in %.2f s, %d rebuilds", self.comm.rank, steps, elapsed, rebuilds
        )
        return batch

    @notes_failures
    def converged(self, batch: Batch | None = None) -> bool:
        """Whether the inner optimizer has converged, decided mesh-wide (collective; an
        integrator never converges)."""
        batch = self._owned(batch)
        if type(self.dynamics).is_converged is BaseDynamics.is_converged:
            return False
        if self.dynamics.global_convergence:
            return self.dynamics.is_converged(batch)
        local = torch.tensor([0.0 if self.dynamics.is_converged(batch) else 1.0])
        return bool(self.comm.all_reduce(local, "max")[0] == 0.0)

    def _owned(self, batch: Batch | None) -> Batch:
        batch = batch if batch is not None else self.batch
        if batch is None:
            raise RuntimeError("call partition(full_system) first, or pass the owned batch")
        self.batch = batch
        return batch

    def __repr__(self) -> str:
        name = type(self.dynamics).__name__
        return f"DomainParallel({name}, rank={self.comm.rank}/{self.comm.size})"
