"""Dynamics stages, hook scopes and the context a hook receives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nvdd_plugins.data import Batch

if TYPE_CHECKING:  # annotation only: BaseDynamics imports this module
    from nvdd_plugins.dynamics.base import BaseDynamics

__all__ = ["DynamicsStage", "Hook", "HookContext", "HookScope", "due_hooks"]


class DynamicsStage(StrEnum):
    """Points in a step where hooks fire."""

    BEFORE_STEP = "before_step"
    BEFORE_COMPUTE = "before_compute"
    AFTER_COMPUTE = "after_compute"
    AFTER_STEP = "after_step"
    ON_CONVERGE = "on_converge"


class HookScope(StrEnum):
    """What a hook on the outer `DomainParallel` sees.

    LOCAL: the rank's own atoms. RANK_ZERO: the full system gathered to rank 0 (runs there
    only). GLOBAL: the full system gathered to every rank (identical everywhere).
    """

    LOCAL = "local"
    RANK_ZERO = "rank_zero"
    GLOBAL = "global"


@dataclass
class HookContext:
    """What a hook receives: the batch it may read (and, for LOCAL hooks, modify), the
    step count, the dynamics, the last model results and whether the run is distributed."""

    batch: Batch
    step: int
    dynamics: BaseDynamics
    results: dict[str, Any] = field(default_factory=dict)
    distributed: bool = False


@runtime_checkable
class Hook(Protocol):
    """A callable with `stage` and `frequency` (and optional `scope`) attributes."""

    stage: DynamicsStage
    frequency: int

    def __call__(self, ctx: HookContext, stage: DynamicsStage) -> None:
        """Run at `stage` every `frequency` steps."""


def due_hooks(hooks: Sequence[Hook], stage: DynamicsStage, step: int) -> list[Hook]:
    """The hooks registered for `stage` that fire at `step` (every `frequency` steps)."""
    return [
        hook
        for hook in hooks
        if hook.stage == stage and step % max(int(getattr(hook, "frequency", 1)), 1) == 0
    ]
