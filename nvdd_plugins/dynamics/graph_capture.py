"""What every user of captured graphs shares (MD steps: `GraphedSteps`; the ASE calculator's
force call: `GraphedCalls`): the recorder factory and the current graph, a capture timed into
`GraphPayoff`, and the two ways captures stop for good: "auto" finds they do not pay, or a
capture fails (an error when graphs were asked for with `cuda_graphs=True`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from nvdd_plugins.dynamics.graph_payoff import GraphPayoff
from nvdd_plugins.dynamics.step_graph import StepGraph

logger = logging.getLogger(__name__)

__all__ = ["CapturedGraphs"]


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
