"""The bridge's model call replayed from a captured CUDA graph between rebuilds, as
`DomainParallel` replays its steps.

A graph holds one view (the same rows, plan and pair list): `GivenRowsModel.view` checks
each step on the host whether LAMMPS's rows are the same and none moved more than half the
skin, and returns the held view only then, so a replay is valid whenever the view is the
captured one. Only a rank that exchanges nothing with other ranks can replay (one rank:
its ghosts are self-images, copied by index on the device); an exchange through MPI runs on
the host, which a graph cannot hold. `cuda_graphs="auto"` as in `DomainParallel`: captures
go on while their replays have saved what they cost (`GraphPayoff`).

A new view's first `EAGER_CALLS` calls run eagerly, outside any graph: after a rebuild the
engine checks one forward and verifies the spec's shortcuts in the next, and the first forward
on the shortcut path fills the view's lazy index caches; a capture records that path only
once a warm-up has taken it (a cache made inside a capture would live in its memory pool).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvdd_plugins.distributed_model import GivenRowsModel, HaloView
from nvdd_plugins.dynamics import CapturedGraphs, StepGraph

__all__ = ["EAGER_CALLS", "GraphedRows"]

EAGER_CALLS = 2
"""Calls of a new view that run eagerly before its capture (the checked and the verifying
forward)."""


class GraphedRows(CapturedGraphs):
    """Energies and forces of a held view from a replay.

    Args:
        layout: the bridge's `GivenRowsModel` (its communicator must have no peers).
        graph_factory: makes a `StepGraph` for the rows' device.
        required: capture every new view even when replays do not pay, and raise when a
            capture fails (`cuda_graphs=True`); default "auto".
    """

    def __init__(
        self,
        layout: GivenRowsModel,
        graph_factory: Callable[[torch.device], StepGraph],
        required: bool = False,
    ) -> None:
        super().__init__(graph_factory, "the LAMMPS bridge's model call", "calls")
        self.layout = layout
        self.required = required
        self.replays = 0
        self._pending: tuple[HaloView | None, int] = (None, 0)  # a new view, its eager calls
        self._view: HaloView | None = None
        self._inputs: tuple[torch.Tensor, torch.Tensor] | None = None
        self._per_row: torch.Tensor | None = None

    def __call__(
        self, view: HaloView, positions: torch.Tensor, cell: torch.Tensor
    ) -> torch.Tensor | None:
        """(n_local, 4) energies and forces of the rows from a replay, or None when this
        call runs eagerly (one of a new view's first `EAGER_CALLS`, captures stopped, or a
        capture failed). The result is overwritten by the next replay."""
        if self.stopped:
            return None
        if self.graph is None or view is not self._view or not self._fits(positions, cell):
            pending, calls = self._pending
            calls = calls + 1 if view is pending else 1
            self._pending = (view, calls)
            if calls <= EAGER_CALLS:
                return None
            if not self.still_pays(self.required):
                return None
            try:
                self._capture(view, positions, cell)
            except RuntimeError as err:
                self.give_up(err, self.required)
                return None
        assert self.graph is not None and self._inputs is not None
        self._inputs[0].copy_(positions)
        self._inputs[1].copy_(cell)
        start = self.graph.clock()
        self.graph.replay()
        self.replays += 1
        self.payoff.replayed(1, self.graph.clock() - start)
        return self._per_row

    def eager(self, view: HaloView, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """The same (n_local, 4) energies and forces, evaluated eagerly."""
        out = self.layout(view, positions, cell)
        return torch.cat([out["energies"].unsqueeze(1), out["forces"]], dim=1)

    def _fits(self, positions: torch.Tensor, cell: torch.Tensor) -> bool:
        held = self._inputs
        return held is not None and all(
            a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            for a, b in zip(held, (positions, cell), strict=True)
        )

    def _capture(self, view: HaloView, positions: torch.Tensor, cell: torch.Tensor) -> None:
        inputs = (positions.detach().clone(), cell.detach().clone())

        def warm_up() -> None:
            self.eager(view, *inputs)

        def body() -> None:
            self._per_row = self.eager(view, *inputs)

        self.graph = self.record(positions.device, warm_up, lambda: body)
        self._view, self._inputs = view, inputs

    def _release(self) -> None:
        super()._release()
        self._view = self._inputs = self._per_row = None
