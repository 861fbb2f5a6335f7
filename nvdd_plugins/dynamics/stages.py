"""Dynamics stages, the context a hook receives and hook registrations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nvdd_plugins.data import Batch

if TYPE_CHECKING:  # annotation only: BaseDynamics imports this module
    from nvdd_plugins.dynamics.base import BaseDynamics

__all__ = ["AttachedHook", "DynamicsStage", "Hook", "HookContext", "HookFunction"]


class DynamicsStage(StrEnum):
    """Points in a step where hooks fire."""

    BEFORE_STEP = "before_step"
    BEFORE_COMPUTE = "before_compute"
    AFTER_COMPUTE = "after_compute"
    AFTER_STEP = "after_step"
    ON_CONVERGE = "on_converge"


@dataclass
class HookContext:
    """What a hook receives: the batch it may read (and modify, where it is the integrated
    batch), the step count, the dynamics and the last model results."""

    batch: Batch
    step: int
    dynamics: BaseDynamics
    results: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Hook(Protocol):
    """A callable with `stage` and `frequency` attributes, as `hooks=[...]` lists take."""

    stage: DynamicsStage
    frequency: int

    def __call__(self, ctx: HookContext, stage: DynamicsStage) -> None:
        """Run at `stage` every `frequency` steps."""


HookFunction = Callable[[HookContext, DynamicsStage], None]


@dataclass(frozen=True)
class AttachedHook:
    """A registered hook: called at `stage` on the steps that are multiples of `interval`,
    and, with `at_start`, also at BEFORE_STEP of step 0 (before the first step of a run
    from step count 0, once its forces are computed: the initial state, which ASE's
    observers see too)."""

    hook: HookFunction
    stage: DynamicsStage
    interval: int
    at_start: bool = False

    @classmethod
    def of(
        cls, hook: HookFunction, interval: int | None = None, stage: DynamicsStage | None = None
    ) -> AttachedHook:
        """Register `hook`; `interval` defaults to its `frequency` (else 1), `stage` to its
        `stage` and `at_start` to its `at_start` (else False). An interval below 1 means
        every step."""
        if interval is None:
            interval = getattr(hook, "frequency", 1)
        stage = hook.stage if stage is None else stage
        return cls(hook, stage, max(int(interval), 1), bool(getattr(hook, "at_start", False)))

    def due(self, stage: DynamicsStage, step: int) -> bool:
        """Whether the hook fires at `stage` of step `step`."""
        if self.at_start and step == 0 and stage is DynamicsStage.BEFORE_STEP:
            return True
        return self.stage == stage and step % self.interval == 0
