"""`BaseDynamics`: a fixed step of per-atom updates around one model evaluation, with hooks.

Units are ASE's: positions Å, masses amu, energies eV, forces eV/Å; `dt` is given in fs and
velocities are in ASE's internal unit Å·sqrt(eV/amu) (what `ase.Atoms.get_velocities()`
returns), so kinetic energy 1/2 m v^2 is in eV.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.stages import DynamicsStage, Hook, HookContext, due_hooks
from nvdd_plugins.models import BaseModelMixin, ModelEvaluator

__all__ = ["BaseDynamics", "Evaluator"]

logger = logging.getLogger(__name__)

Evaluator = Callable[[Batch, Iterable[str]], dict[str, torch.Tensor]]


class BaseDynamics:
    """An integrator or optimizer over a `Batch`.

    Subclasses implement `pre_update` (before the force call) and `post_update` (after it);
    both must be per-atom so they stay exact when each rank only sees its own atoms. The
    model is evaluated through `self.evaluator`, which `DomainParallel` swaps for a
    `DistributedModel`.

    Args:
        model: the model wrapper.
        dt: time step, fs.
        hooks: hooks fired at their `stage` every `frequency` steps.
        skin: Verlet skin (Å) of the single-process neighbour list.
    """

    required_fields: tuple[str, ...] = ("positions", "atomic_numbers")
    compute_properties: tuple[str, ...] = ("energy", "forces")

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
        self.hooks: list[Hook] = list(hooks)
        self.evaluator: Evaluator = ModelEvaluator(model, skin)
        self.compute_view: Callable[[Batch], Batch] = _same_batch
        self.step_count = 0
        self.distributed = False
        self.results: dict[str, torch.Tensor] = {}

    @property
    def dt_internal(self) -> float:
        """The step in ASE's internal time unit."""
        return self.dt * ase.units.fs

    # -- subclass interface -----------------------------------------------------------------
    def pre_update(self, batch: Batch) -> None:
        """Per-atom update before the force call (e.g. half kick + drift)."""

    def post_update(self, batch: Batch) -> None:
        """Per-atom update after the force call (e.g. second half kick)."""

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

    # -- driving --------------------------------------------------------------------------
    def _due(self, stage: DynamicsStage) -> list[Hook]:
        return due_hooks(self.hooks, stage, self.step_count)

    def fire(self, stage: DynamicsStage, batch: Batch) -> None:
        """Run this dynamics' hooks registered for `stage` that are due this step."""
        for hook in self._due(stage):
            hook(HookContext(batch, self.step_count, self, self.results, self.distributed), stage)

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

        Compute-stage hooks see `self.compute_view(batch)`: the batch itself in one process,
        the rank's padded compute view (owned + ghost atoms) under `DomainParallel`.
        """
        if self._due(DynamicsStage.BEFORE_COMPUTE):
            self.fire(DynamicsStage.BEFORE_COMPUTE, self.compute_view(batch))
        self.results = self.evaluator(batch, self.compute_properties)
        batch.forces = self.results["forces"]
        batch.energy = self.results["energy"]
        if "stress" in self.results:
            batch.stress = self.results["stress"]
        if self._due(DynamicsStage.AFTER_COMPUTE):
            self.fire(DynamicsStage.AFTER_COMPUTE, self.compute_view(batch))

    def prepare(self, batch: Batch) -> None:
        """Check fields and compute the initial forces if the batch has none."""
        self.check_fields(batch)
        if "forces" not in batch or "energy" not in batch:
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

    def run(self, batch: Batch, n_steps: int) -> Batch:
        """`n_steps` steps (stops early when an optimizer converges); returns the batch."""
        for _ in range(int(n_steps)):
            self.step(batch)
            if self.is_converged(batch):
                self.fire(DynamicsStage.ON_CONVERGE, batch)
                break
        return batch


def _same_batch(batch: Batch) -> Batch:
    return batch
