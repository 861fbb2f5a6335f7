"""Force calls between neighbour-list rebuilds replayed from one captured CUDA graph.

The calculator keeps one batch on the device and writes each call's positions and cell into
it in place, so a call between rebuilds runs the same kernels on the same buffers: it is
captured once per view (`StepGraph`, the recorder `GraphedSteps` uses for MD steps) and
replayed. The replay also computes, on the device, whether the positions need a rebuild (or
are not finite) and whether energy and forces are finite; the caller reads that flag (it
synchronises anyway to hand the results to ASE) and, when it is up, redoes the call eagerly,
which rebuilds as an eager call would. Results are the eager ones: the same kernels on the
same values. With `cuda_graphs="auto"` a view is captured only while the graphs so far saved
what they cost (`GraphPayoff`, as for MD steps).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics import CapturedGraphs, CudaStepGraph, FixedShapeEvaluator, StepGraph

__all__ = ["GraphedCalls"]


class GraphedCalls(CapturedGraphs):
    """Replay an evaluator's fixed-shape evaluation of one batch as a captured graph.

    Args:
        evaluator: the `FixedShapeEvaluator` (a `ReplicatedModel` at one rank).
        graph_factory: makes a `StepGraph` for the batch's device (default: `CudaStepGraph`).
    """

    def __init__(
        self,
        evaluator: FixedShapeEvaluator,
        graph_factory: Callable[[torch.device], StepGraph] = CudaStepGraph,
    ) -> None:
        super().__init__(graph_factory, "the calculator's force call", "calls")
        self.evaluator = evaluator
        self.replays = 0  # calls answered by a replay (kept or not)
        self._key: tuple[Hashable, frozenset[str]] | None = None
        self._inputs: tuple[torch.Tensor, ...] = ()  # the position and cell tensors captured
        self._outputs: dict[str, torch.Tensor] = {}  # the graph's results, as captured
        self._dropped = torch.zeros((), dtype=torch.bool)

    def __call__(self, batch: Batch, properties: Iterable[str]) -> dict[str, torch.Tensor] | None:
        """`properties` of `batch` from a replay, or None: no graph may be captured now, or
        the replay's positions need a rebuild or its results are not finite (the caller then
        evaluates eagerly). `batch` must keep its position and cell tensors between calls,
        written in place; new tensors are captured again."""
        if self.stopped:
            return None
        token = self.evaluator.graph_token(batch)
        if token is None:
            return None
        wanted = frozenset(properties)
        inputs = (batch.positions, batch.cell)
        same_inputs = len(self._inputs) == 2 and all(map(operator.is_, self._inputs, inputs))
        if self.graph is None or (token, wanted) != self._key or not same_inputs:
            required = self.evaluator.graphs_required()
            if not self.still_pays(required):
                return None
            try:
                self._capture(batch, wanted)
            except RuntimeError as err:
                self.give_up(err, required)
                return None
        assert self.graph is not None
        start = self.graph.clock()
        self.graph.replay()
        self.replays += 1
        kept = not bool(self._dropped)
        self.payoff.replayed(int(kept), self.graph.clock() - start)
        if not kept:
            return None
        return dict(self._outputs)  # overwritten by the next replay: copy what you keep

    def _capture(self, batch: Batch, wanted: frozenset[str]) -> None:
        """Warm up on the current positions, then capture the evaluation and its flag."""

        def warm_up() -> None:
            self._evaluate(batch, wanted)

        def body() -> None:
            self._outputs, self._dropped = self._evaluate(batch, wanted)

        graph = self.record(batch.positions.device, warm_up, lambda: body)
        # the warm-up may have resized the view's buffers (`graph_token` says so)
        token = self.evaluator.graph_token(batch)
        self.graph, self._key = graph, (token, wanted)
        self._inputs = (batch.positions, batch.cell)

    def _evaluate(
        self, batch: Batch, wanted: frozenset[str]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The fixed-shape evaluation and whether its result cannot be kept."""
        results = self.evaluator.evaluate_fixed(batch, wanted)
        stale = self.evaluator.stale_for(batch)  # after the evaluation, which may flag too
        broken = ~torch.isfinite(results["energy"].sum() + results["forces"].sum())
        return results, stale | broken
