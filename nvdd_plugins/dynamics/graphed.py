"""Steps between neighbour-list rebuilds replayed as one captured CUDA graph.

A step of a `capturable` dynamics is pre_update, one evaluation at the view's fixed shapes
and post_update. `GraphedSteps` captures that step once per view (after the eager step that
rebuilt and checked it) on static buffers and replays it. Each replay also asks the
evaluator, on the device, whether the drifted positions need a rebuild (or are not finite)
and whether the new energy and forces are finite; such a step is not kept: its state is
masked out (`torch.where`), a sticky device flag stays up, and the replays after it change
nothing. The host reads a device counter of the steps kept, one replay behind (the next
replay is already queued), so the device never waits for the host; the step that raised the
flag is then taken eagerly from the last kept state, rebuilding as an eager run would. The
trajectory is the eager one: the same kernels on the same values (to rounding where a
kernel's summation order is not fixed, e.g. atomic scatters). The dynamics sees the step
count as a device counter (`step_number`: the count the replays started from plus the steps
kept), and the step is captured again when the host values it holds as constants
(`graph_inputs()`: dt, a target temperature) change.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.graph_capture import CapturedGraphs
from nvdd_plugins.dynamics.stages import AttachedHook, DynamicsStage
from nvdd_plugins.dynamics.step_graph import CudaStepGraph, StepGraph

if TYPE_CHECKING:  # annotation only: BaseDynamics imports this module
    from nvdd_plugins.dynamics.base import BaseDynamics

__all__ = ["FixedShapeEvaluator", "GraphedSteps", "hook_free_steps"]

_STEP_STAGES = (
    DynamicsStage.BEFORE_STEP,
    DynamicsStage.BEFORE_COMPUTE,
    DynamicsStage.AFTER_COMPUTE,
)


@runtime_checkable
class FixedShapeEvaluator(Protocol):
    """An evaluator whose evaluations between rebuilds can be captured."""

    def graph_token(self, batch: Batch) -> Hashable | None:
        """The current view's identity when a step on `batch` may be captured now, else
        None; it changes at every rebuild."""

    def stale_for(self, batch: Batch) -> torch.Tensor:
        """0-d bool on the device: `batch`'s positions need a rebuild or are not finite, or
        the last evaluation on them cannot be kept."""

    def evaluate_fixed(self, batch: Batch, properties: Iterable[str]) -> dict[str, torch.Tensor]:
        """The model's `properties` on the current view, without the rebuild check."""

    def graphs_required(self) -> bool:
        """Whether graphs were asked for explicitly (`cuda_graphs=True`): a step that
        cannot be captured is then an error, not a fall-back to eager steps."""


def hook_free_steps(hooks: Sequence[AttachedHook], start: int, limit: int) -> int:
    """How many steps from step count `start` (at most `limit`) no hook is due in: hooks of
    BEFORE_STEP and the compute stages fire at the step count a step starts from,
    AFTER_STEP hooks at the count it ends at (a hook is due at multiples of its interval;
    one firing `at_start` is due before the step from count 0)."""
    free = limit
    for entry in hooks:
        if entry.at_start and start == 0:
            free = 0
        elif entry.stage in _STEP_STAGES:
            free = min(free, -start % entry.interval)
        elif entry.stage is DynamicsStage.AFTER_STEP:
            free = min(free, -(start + 1) % entry.interval)
    return max(free, 0)


class GraphedSteps(CapturedGraphs):
    """Take a dynamics' steps by replaying a captured step (see the module docstring).

    Args:
        dynamics: a `capturable` dynamics whose evaluator is a `FixedShapeEvaluator`.
        graph_factory: makes a `StepGraph` for the atoms' device (default: `CudaStepGraph`).
    """

    def __init__(
        self,
        dynamics: BaseDynamics,
        graph_factory: Callable[[torch.device], StepGraph] = CudaStepGraph,
    ) -> None:
        super().__init__(graph_factory, f"{type(dynamics).__name__}'s step", "steps")
        self.dynamics = dynamics
        self._token: Hashable | None = None
        self._shared: dict[str, torch.Tensor] = {}  # fields the step reads, as captured
        self._state: dict[str, torch.Tensor] = {}  # static copies of the fields it replaces
        self._flag = torch.zeros(())
        self._kept = torch.zeros(())
        self._start = torch.zeros(())  # the step count the replays start from
        self._inputs: tuple[object, ...] = ()  # the dynamics' `graph_inputs()` as captured

    def advance(self, batch: Batch, limit: int) -> int:
        """Take up to `limit` steps of `batch` by replaying the captured step; returns how
        many were kept (0 when the evaluator cannot be captured now, or the first step needs
        a rebuild: the caller then takes an eager step)."""
        evaluator = self.dynamics.evaluator
        if limit < 1 or self.stopped:
            return 0
        if not isinstance(evaluator, FixedShapeEvaluator):
            return 0
        token = evaluator.graph_token(batch)
        if token is None or not self.dynamics.has_current_forces(batch):
            return 0
        if self.graph is None or token != self._token or not self._same_inputs(batch):
            if not self.still_pays(evaluator.graphs_required()):
                return 0
            try:
                self._capture(batch, evaluator)
            except RuntimeError as err:
                self.give_up(err, evaluator.graphs_required())
                return 0
        for name, static in self._state.items():
            static.copy_(getattr(batch, name))
        self._flag.zero_()
        self._kept.zero_()
        self._start.fill_(self.dynamics.step_count)
        kept = self._replay(limit)
        for name, static in self._state.items():
            setattr(batch, name, static.clone())
        self.dynamics.step_count += kept
        self.dynamics.mark_forces_current(batch)
        return kept

    def _replay(self, limit: int) -> int:
        """Replay up to `limit` times, reading the kept count one replay behind."""
        assert self.graph is not None
        start = self.graph.clock()
        pending = None
        for replays in range(1, limit + 1):
            self.graph.replay()
            if pending is not None and pending() < replays - 1:
                break  # the flag went up: the replay just queued keeps nothing
            pending = self.graph.read_later(self._kept)
        kept = self.graph.read_later(self._kept)()
        self.payoff.replayed(kept, self.graph.clock() - start)
        return kept

    def _release(self) -> None:
        """Drop the graph and the static buffers only it used."""
        self.graph, self._shared, self._state = None, {}, {}

    def _same_inputs(self, batch: Batch) -> bool:
        """Whether `batch` holds the tensors the graph reads and the dynamics' host inputs
        are the captured ones (else it is captured again)."""
        if self.dynamics.graph_inputs() != self._inputs:
            return False
        fields = dict(batch.fields())
        if fields.keys() != self._shared.keys() | self._state.keys():
            return False
        shared = all(fields[name] is value for name, value in self._shared.items())
        return shared and all(
            fields[name].shape == value.shape and fields[name].dtype == value.dtype
            for name, value in self._state.items()
        )

    def _capture(self, batch: Batch, evaluator: FixedShapeEvaluator) -> None:
        """Find the fields the step replaces (a warm-up step on a copy, kept nowhere), make
        static buffers of them and capture the step on those."""
        fields = dict(batch.fields())
        replaced: list[str] = []

        def warmup() -> None:
            work = batch.copy()
            self._step(work, evaluator, None)
            replaced[:] = [name for name, value in work.fields() if value is not fields.get(name)]

        def prepared() -> Callable[[], None]:
            if not set(replaced) <= fields.keys():
                raise RuntimeError(
                    f"{type(self.dynamics).__name__}'s step adds fields "
                    f"{sorted(set(replaced) - fields.keys())}: it cannot be captured"
                )
            self._state = {name: fields[name].clone() for name in replaced}
            self._shared = {name: value for name, value in fields.items() if name not in replaced}
            self._flag = torch.zeros((), dtype=torch.bool, device=device)
            self._kept = torch.zeros((), dtype=torch.int64, device=device)
            self._start = torch.zeros((), dtype=torch.int64, device=device)
            self._inputs = self.dynamics.graph_inputs()
            return lambda: self._kept_step(batch, evaluator)

        device = batch.positions.device
        graph = self.record(device, warmup, prepared)
        # the warm-up may have resized the view's buffers (`graph_token` says so)
        self.graph, self._token = graph, evaluator.graph_token(batch)

    def _kept_step(self, batch: Batch, evaluator: FixedShapeEvaluator) -> None:
        """The recorded step: the state fields are the static buffers, overwritten only
        when the step is kept (no flag up before, positions fresh, results finite)."""
        work = batch.copy()
        for name, static in self._state.items():
            setattr(work, name, static)
        stale = self._step(work, evaluator, self._start + self._kept)
        energy, forces = work.energy.detach(), work.forces.detach()
        broken = ~torch.isfinite(energy.sum() + forces.sum())
        dropped = self._flag | stale | broken
        for name, static in self._state.items():
            static.copy_(torch.where(dropped, static, getattr(work, name)))
        self._kept.add_((~dropped).to(self._kept.dtype))
        self._flag.copy_(dropped)

    def _step(
        self, work: Batch, evaluator: FixedShapeEvaluator, step: torch.Tensor | None
    ) -> torch.Tensor:
        """pre_update, the stale check, the evaluation and post_update on `work`, with the
        dynamics' `step_number` the device counter `step` (None: its host count); returns
        the stale flag."""
        dynamics = self.dynamics
        dynamics.device_step = step
        try:
            dynamics.pre_update(work)
            results = evaluator.evaluate_fixed(work, dynamics.compute_properties)
            stale = evaluator.stale_for(work)  # after the evaluation, which may flag too
            work.forces = results["forces"]
            work.energy = results["energy"]
            if "stress" in results:
                work.stress = results["stress"]
            dynamics.post_update(work)
        finally:
            dynamics.device_step = None
        return stale
