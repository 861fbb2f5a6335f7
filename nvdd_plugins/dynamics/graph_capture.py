"""What every user of captured graphs shares (MD steps: `GraphedSteps`; a front end's force
call: `ReplayedCalls`): the recorder factory and the current graph, a capture timed into
`GraphPayoff`, and the two ways captures stop for good: "auto" finds they do not pay, or a
capture fails (an error when graphs were asked for with `cuda_graphs=True`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

import torch

from nvdd_plugins.dynamics.graph_payoff import GraphPayoff
from nvdd_plugins.dynamics.step_graph import StepGraph

logger = logging.getLogger(__name__)

__all__ = ["CapturedGraphs", "ReplayedCalls"]


class CapturedGraphs:
    """Captured graphs of one kind of work and whether to capture more.

    Args:
        graph_factory: makes a `StepGraph` for a device.
        what: what is captured, for messages ("NVE's step").
        unit: what runs eagerly instead, plural, for messages ("steps").
    """

    def __init__(
        self, graph_factory: Callable[[torch.device], StepGraph], what: str, unit: str
    ) -> None:
        self.graph_factory = graph_factory
        self.what = what
        self.unit = unit
        self.graph: StepGraph | None = None
        self.captures = 0  # graphs captured so far
        self.failure: str | None = None  # why capture failed (then the work stays eager)
        self.declined: str | None = None  # why "auto" stopped capturing (graphs did not pay)
        self.payoff = GraphPayoff()

    @property
    def stopped(self) -> bool:
        """Whether captures stopped for good (one failed, or "auto" found they do not pay)."""
        return bool(self.failure or self.declined)

    def still_pays(self, required: bool) -> bool:
        """Whether to capture again: always when graphs are `required` (`cuda_graphs=True`);
        with "auto" while the graphs so far saved what they cost, else never again."""
        if required or self.payoff.pays():
            return True
        self._release()
        self.declined = f'cuda_graphs="auto": {self.payoff}'
        logger.info("%s; %s run eagerly from now on", self.declined, self.unit)
        return False

    def record(
        self,
        device: torch.device,
        warm_up: Callable[[], None],
        prepared: Callable[[], Callable[[], None]],
    ) -> StepGraph:
        """A new graph: `warm_up()` runs (twice for the first graph: the second run times
        an eager step without one-off costs, see `GraphPayoff`), then `prepared()` (after
        the warm-up: it may set up static buffers, or raise a RuntimeError) returns the
        body that is recorded. All is timed into `payoff`."""
        self._release()  # the old graph's memory goes before the new one is captured
        graph = self.graph_factory(device)
        start = graph.clock()
        if not self.captures:
            graph.warm_up(warm_up)  # the one-off costs fall on this run, not the timed one
        warm_up_start = graph.clock()
        graph.warm_up(warm_up)
        eager = graph.clock() - warm_up_start
        graph.capture(prepared())
        self.payoff.captured(eager, graph.clock() - start)
        self.captures += 1
        return graph

    def give_up(self, err: RuntimeError, required: bool) -> None:
        """A capture failed (the work reads device values on the host, or copies from
        unpinned host memory): an error when graphs are `required`, else a warning and
        eager work from now on."""
        self._release()
        self.failure = f"{self.what} could not be captured: {err}"
        if required:
            raise RuntimeError(
                f"cuda_graphs=True: {self.failure}. Keep host reads and host-to-device copies "
                f'out of the model\'s forward, or pass cuda_graphs="auto" (eager {self.unit} '
                "then) or False"
            ) from err
        logger.warning("%s; %s run eagerly", self.failure, self.unit)

    def _release(self) -> None:
        """Drop the graph (and, in subclasses, what only it used)."""
        self.graph = None


Evaluation = Callable[[], tuple[Any, torch.Tensor | None]]
"""A fixed-shape evaluation: its results, and a 0-d device flag that is up when a replay's
results cannot be kept (or None: they always can)."""


class ReplayedCalls(CapturedGraphs):
    """A front end's force call replayed from one captured graph while its key holds (the
    ASE calculator's and the LAMMPS bridge's calls between rebuilds).

    A call with a new key (a new view, other outputs wanted) or inputs of other shapes runs
    eagerly `eager_calls` times, then is captured. Later calls with the same key copy their
    inputs into the captured ones (unless they are those) and replay.

    Args:
        graph_factory: makes a `StepGraph` for the inputs' device.
        what: what is captured, for messages.
        eager_calls: calls of a new key that run eagerly before its capture (a warm-up
            that must happen outside any graph, e.g. a view's lazily made index caches).
    """

    def __init__(
        self,
        graph_factory: Callable[[torch.device], StepGraph],
        what: str,
        eager_calls: int = 0,
    ) -> None:
        super().__init__(graph_factory, what, "calls")
        self.eager_calls = eager_calls
        self.replays = 0  # calls answered by a replay (kept or not)
        self._pending: tuple[Hashable, int] = (None, 0)  # a new key, its eager calls so far
        self._key: Hashable = None
        self._inputs: tuple[torch.Tensor, ...] = ()
        self._outputs: Any = None
        self._dropped: torch.Tensor | None = None

    def __call__(
        self,
        key: Callable[[], Hashable],
        inputs: tuple[torch.Tensor, ...],
        evaluate: Evaluation,
        required: bool = False,
    ) -> Any:
        """`evaluate()`'s results from a replay, or None: the caller evaluates eagerly (a
        new key's eager call, captures stopped or failed, or the replay's flag is up).
        `evaluate` reads `inputs`; `key()` is taken again after the capture's warm-up,
        which may resize the view. `required`: capture even when replays do not pay, and
        raise when a capture fails (`cuda_graphs=True`). The results are overwritten by the
        next replay."""
        if self.stopped:
            return None
        now = key()
        if self.graph is None or now != self._key or not self._fits(inputs):
            pending, calls = self._pending
            calls = calls + 1 if now == pending else 1
            self._pending = (now, calls)
            if calls <= self.eager_calls or not self.still_pays(required):
                return None
            try:
                self._capture(key, inputs, evaluate)
            except RuntimeError as err:
                self.give_up(err, required)
                return None
        assert self.graph is not None
        for held, given in zip(self._inputs, inputs, strict=True):
            if held is not given:
                held.copy_(given)
        start = self.graph.clock()
        self.graph.replay()
        self.replays += 1
        kept = self._dropped is None or not bool(self._dropped)
        self.payoff.replayed(int(kept), self.graph.clock() - start)
        return self._outputs if kept else None

    def _fits(self, inputs: tuple[torch.Tensor, ...]) -> bool:
        return len(inputs) == len(self._inputs) and all(
            a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            for a, b in zip(self._inputs, inputs, strict=True)
        )

    def _capture(
        self, key: Callable[[], Hashable], inputs: tuple[torch.Tensor, ...], evaluate: Evaluation
    ) -> None:
        def warm_up() -> None:
            evaluate()

        def body() -> None:
            self._outputs, self._dropped = evaluate()

        self.graph = self.record(inputs[0].device, warm_up, lambda: body)
        self._key, self._inputs = key(), inputs

    def _release(self) -> None:
        super()._release()
        self._key, self._inputs, self._outputs, self._dropped = None, (), None, None
