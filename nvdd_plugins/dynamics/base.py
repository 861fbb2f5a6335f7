"""`BaseDynamics`: a fixed step of per-atom updates around one model evaluation, with hooks.

Units are ASE's: positions Å, masses amu, energies eV, forces eV/Å; `dt` is given in fs and
velocities are in ASE's internal unit Å·sqrt(eV/amu) (what `ase.Atoms.get_velocities()`
returns), so kinetic energy 1/2 m v^2 is in eV.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.graphed import GraphedSteps, hook_free_steps
from nvdd_plugins.dynamics.reduction import SumReducer, local_sums
from nvdd_plugins.dynamics.stages import (
    AttachedHook,
    DynamicsStage,
    Hook,
    HookContext,
    HookFunction,
)
from nvdd_plugins.models import BaseModelMixin, ModelEvaluator

__all__ = ["BaseDynamics", "Evaluator", "EvaluatorFactory", "set_default_evaluator"]

logger = logging.getLogger(__name__)

_RESULTS = ("energy", "forces", "stress")  # the model results a dynamics keeps on the batch


class Evaluator(Protocol):
    """How a dynamics evaluates its model (see `set_default_evaluator`)."""

    uses_batch_neighbors: bool  # a list on the batch is used (`NeighborListHook` may set it)

    def __call__(self, batch: Batch, properties: Iterable[str]) -> dict[str, torch.Tensor]:
        """The model's `properties` (energy, forces, ...) for `batch`'s atoms."""

    def compute_view(self, batch: Batch) -> Batch:
        """The batch the model is evaluated on, as compute-stage hooks see it."""


EvaluatorFactory = Callable[[BaseModelMixin, float, bool], Evaluator]
"""Builds a dynamics' evaluator from its model, Verlet skin (Å) and whether the dynamics'
step may be captured as a CUDA graph (`BaseDynamics.capturable`)."""


def _model_evaluator(model: BaseModelMixin, skin: float, captured_steps: bool) -> Evaluator:
    return ModelEvaluator(model, skin)


_default_evaluator: EvaluatorFactory = _model_evaluator


def set_default_evaluator(factory: EvaluatorFactory) -> None:
    """Register the evaluator every dynamics built afterwards starts with. `nvdd_plugins`
    registers `OneProcessEvaluator` (the one-rank domain-decomposition engine) on import;
    without a registration it is the single-process `ModelEvaluator`. This layer knows no
    ranks: the engine reaches it only through this injection."""
    global _default_evaluator
    _default_evaluator = factory


class BaseDynamics:
    """An integrator or optimizer over a `Batch`.

    Subclasses implement `pre_update` (before the force call) and `post_update` (after it);
    both must be per-atom so they stay exact when the batch holds only part of a system. The
    model is evaluated through `self.evaluator`, an `Evaluator` that may be replaced. A
    global quantity is declared as named partial sums over the batch's atoms and reduced by
    `reduce_sums` (through `self.reducer`, a `SumReducer` that may be replaced), so it is
    the same on every rank.

    Args:
        model: the model wrapper.
        dt: time step, fs.
        hooks: hooks attached at their `stage` every `frequency` steps (see `attach`).
        skin: Verlet skin (Å) of the default evaluator's neighbour list, in one process
            (`DomainParallel` takes its own from `DomainConfig.skin`).
    """

    required_fields: tuple[str, ...] = ("positions", "atomic_numbers")
    compute_properties: tuple[str, ...] = ("energy", "forces")
    # True when `is_converged` reads only reduced quantities (identical on every rank), so a
    # driver need not reduce the decision again
    global_convergence: bool = False
    # True when a step may be captured as a CUDA graph (`nvdd_plugins.dynamics.graphed`):
    # pre_update and post_update replace batch fields (never write them in place), read the
    # step count only as `step_number`, read no other host state but what `graph_inputs`
    # names, and never converge
    capturable: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a subclass that changes the update is not capturable unless it says so itself
        changes_update = "pre_update" in vars(cls) or "post_update" in vars(cls)
        if changes_update and "capturable" not in vars(cls):
            cls.capturable = False

    def __init__(
        self,
        model: BaseModelMixin,
        dt: float,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        if not dt > 0:
            raise ValueError(f"dt must be a positive number of fs, got {dt!r}")
        self.model = model
        self.dt = float(dt)
        self.evaluator: Evaluator = _default_evaluator(model, skin, self.capturable)
        self.graphed = GraphedSteps(self)
        self.reducer: SumReducer = local_sums
        self.step_count = 0
        # a captured step's count on the device (`step_number`); None in eager steps
        self.device_step: torch.Tensor | None = None
        self.results: dict[str, torch.Tensor] = {}
        # model outputs beyond compute_properties that attached hooks read from `results`
        self.asked: tuple[str, ...] = ()
        self._evaluated: weakref.ref[torch.Tensor] | None = None  # the forces it computed last
        self._hooks: list[AttachedHook] = []
        for hook in hooks:
            self.attach(hook)

    @property
    def dt_internal(self) -> float:
        """The step in ASE's internal time unit."""
        return self.dt * ase.units.fs

    @property
    def step_number(self) -> int | torch.Tensor:
        """The step count the current step starts from: `step_count`, or in a captured step
        a 0-d int64 tensor on the device (replays do not advance the host's count)."""
        return self.step_count if self.device_step is None else self.device_step

    def graph_inputs(self) -> tuple[Any, ...]:
        """The host values pre_update and post_update read: a captured step holds them as
        constants, so it is captured again when they change. Subclasses reading more (a
        target temperature) extend it."""
        return (self.dt,)

    # -- subclass interface -----------------------------------------------------------------
    def pre_update(self, batch: Batch) -> None:
        """Per-atom update before the force call (e.g. half kick + drift)."""

    def post_update(self, batch: Batch) -> None:
        """Per-atom update after the force call (e.g. second half kick)."""

    def reduce_sums(self, partials: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The global sums of named per-rank partial sums (see `nvdd_plugins.dynamics.
        reduction`): the partials themselves in one process, one all-reduce under
        `DomainParallel`. Every rank must call it at the same point with the same names."""
        return self.reducer(partials)

    def is_converged(self, batch: Batch) -> bool:
        """Whether an optimizer has converged (integrators never do)."""
        return False

    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The mutable state a restart needs ({"step_count": ...}); constructor arguments are
        not included. Subclasses that keep more state extend it (plain Python scalars,
        strings and tensors, so checkpoints load with `weights_only=True`)."""
        return {"step_count": self.step_count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.step_count = int(state["step_count"])

    # -- hooks ----------------------------------------------------------------------------
    def attach(
        self, hook: HookFunction, interval: int | None = None, stage: DynamicsStage | None = None
    ) -> None:
        """Call `hook(ctx, stage)` at `stage` (default: `hook.stage`) every `interval` steps
        (default: `hook.frequency`, else 1). Hooks of one stage fire in attachment order.
        The model outputs a hook names in `hook.requires` are evaluated at every eager
        force call from then on (`ask_for`)."""
        self._hooks.append(AttachedHook.of(hook, interval, stage))
        self.ask_for(getattr(hook, "requires", ()))

    def ask_for(self, properties: Iterable[str]) -> None:
        """Evaluate `properties` (model outputs, e.g. "heat_flux_tensors") besides
        `compute_properties` at every eager force call, for hooks reading `ctx.results`."""
        self.asked = tuple(dict.fromkeys((*self.asked, *properties)))

    @property
    def hooks(self) -> tuple[AttachedHook, ...]:
        """The attached hooks, in the order they were attached."""
        return tuple(self._hooks)

    def _due(self, stage: DynamicsStage) -> list[AttachedHook]:
        return [entry for entry in self._hooks if entry.due(stage, self.step_count)]

    def fire(self, stage: DynamicsStage, batch: Batch) -> None:
        """Run this dynamics' hooks attached at `stage` that are due this step."""
        for entry in self._due(stage):
            entry.hook(HookContext(batch, self.step_count, self, self.results), stage)

    # -- driving --------------------------------------------------------------------------
    def check_fields(self, batch: Batch) -> None:
        """Raise a clear error when the batch lacks a field this dynamics reads."""
        missing = [name for name in self.required_fields if name not in batch]
        if missing:
            raise ValueError(
                f"{type(self).__name__} needs per-atom fields {missing}: pass atomic_masses to "
                "AtomicData(...) and attach velocities with data.add_node_property("
                '"velocities", v) before Batch.from_data_list'
            )

    def compute(self, batch: Batch) -> None:
        """Evaluate the model and store energy/forces (and stress) on the batch.

        Compute-stage hooks see `self.evaluator.compute_view(batch)` (the batch itself in
        one process).
        """
        if self._due(DynamicsStage.BEFORE_COMPUTE):
            self.fire(DynamicsStage.BEFORE_COMPUTE, self.evaluator.compute_view(batch))
        self.results = self.evaluator(batch, (*self.compute_properties, *self.asked))
        batch.forces = self.results["forces"]
        batch.energy = self.results["energy"]
        if "stress" in self.results:
            batch.stress = self.results["stress"]
        self._evaluated = weakref.ref(batch.forces)
        if self._due(DynamicsStage.AFTER_COMPUTE):
            self.fire(DynamicsStage.AFTER_COMPUTE, self.evaluator.compute_view(batch))

    def has_current_forces(self, batch: Batch) -> bool:
        """Whether `batch` carries what `compute_properties` names and its forces are the
        ones this dynamics computed last (or was told to trust by `mark_forces_current`)."""
        if any(name not in batch for name in self.compute_properties):
            return False
        return self._evaluated is not None and self._evaluated() is batch.forces

    def mark_forces_current(self, batch: Batch) -> None:
        """Trust the energy and forces (and stress) `batch` carries as the model's values at
        its current positions and cell, so the next step starts from them instead of
        evaluating the model. Only for values that are current (a restart, or forces just
        computed by the same model); placeholders (zeros) must never be marked."""
        missing = [name for name in self.compute_properties if name not in batch]
        if missing:
            raise ValueError(f"mark_forces_current: the batch has no {missing} to trust")
        self.results = {name: batch.get(name) for name in _RESULTS if name in batch}
        self._evaluated = weakref.ref(batch.forces)

    def prepare(self, batch: Batch) -> None:
        """Check fields, and evaluate the model unless the batch's forces are current
        (`has_current_forces`): energy or forces a batch was built with — zeros as
        placeholders, or values of other positions — are never used as they are."""
        self.check_fields(batch)
        if not self.has_current_forces(batch):
            self.compute(batch)

    def step(self, batch: Batch) -> None:
        """One step: BEFORE_STEP hooks, pre_update, compute, post_update, AFTER_STEP hooks."""
        self.prepare(batch)
        self.fire(DynamicsStage.BEFORE_STEP, batch)
        self.pre_update(batch)
        self.compute(batch)
        self.post_update(batch)
        self.step_count += 1
        self.fire(DynamicsStage.AFTER_STEP, batch)

    def run(self, batch: Batch, n_steps: int, forces_current: bool = False) -> Batch:
        """`n_steps` steps (stops early when an optimizer converges); returns the batch.

        The first step evaluates the model unless the batch carries forces this dynamics
        computed; `forces_current=True` trusts the energy and forces the batch was given
        instead (see `mark_forces_current`).
        """
        if forces_current:
            self.mark_forces_current(batch)
        n_steps, done = int(n_steps), 0
        while done < n_steps:
            done += self.replayed_steps(batch, n_steps - done, ())
            if done == n_steps:
                break
            self.step(batch)
            done += 1
            if self.is_converged(batch):
                self.fire(DynamicsStage.ON_CONVERGE, batch)
                break
        return batch

    def replayed_steps(self, batch: Batch, limit: int, hooks: Iterable[AttachedHook]) -> int:
        """Take up to `limit` steps as replays of a captured CUDA graph (`graphed`), stopping
        before a step where one of this dynamics' hooks or `hooks` (a driver's) is due;
        returns how many were taken (0 where the step cannot be replayed now)."""
        if not self.capturable:
            return 0
        limit = hook_free_steps([*self._hooks, *hooks], self.step_count, limit)
        return self.graphed.advance(batch, limit)
