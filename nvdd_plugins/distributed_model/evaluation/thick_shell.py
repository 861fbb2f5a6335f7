"""`ChunkedRows`: rows in a thick ghost shell cut into spatial chunks, each a view of its own.

Each chunk is a sub-domain of a spatial grid over the target atoms plus every atom image
within `n_layers` cutoffs of it, so the targets' energies need no exchange between chunks.
The engine evaluates each chunk's view as it evaluates a whole one (`HaloEngine.evaluate`)
and places its results into the rows it images (`IntoRows`); forces, stress and per-atom
stresses are derivatives of the chunk's own atoms' energy, so contributions of ghost images
flow back to their atoms and the chunks' derivatives add up to the rows'. The ghost shell is
recomputed work: `ChunkPlan.redundancy` reports it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import torch

from nvdd_plugins.decomposition import DecompositionFrame, GhostImages, SpatialPartitioner
from nvdd_plugins.distributed_model.evaluation.derivatives import Wanted
from nvdd_plugins.distributed_model.evaluation.results import IntoRows
from nvdd_plugins.distributed_model.evaluation.shells import ThickShell
from nvdd_plugins.distributed_model.rows.chunk_grid import (
    ChunkPlan,
    chunk_rows,
    fitting_chunks,
    measured_row_limit,
    partitioned,
)
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.distributed_model.rows.view_build import chunk_view

__all__ = ["ChunkedRows"]

logger = logging.getLogger(__name__)


class ChunkedRows:
    """The chunks of rows in a `ThickShell`, as views.

    Args:
        shell: the thick shell (its `chunk_rows` bounds the rows per chunk).
        cutoff: the model's cutoff, Å.
        evaluate: `HaloEngine.evaluate`; with `chunk_rows` "auto" the rows per chunk come
            from its peak device memory on one chunk.

    Attributes:
        grid: chunks per axis, fixed (then `chunk_rows` is not used); None: the fewest that fit.
        last_plan: the chunks of the last evaluation with targets.
    """

    def __init__(
        self,
        shell: ThickShell,
        cutoff: float,
        evaluate: Callable[..., object],
    ) -> None:
        self.n_layers = shell.n_layers
        self.cutoff = float(cutoff)
        self.width = shell.n_layers * self.cutoff
        self.evaluate = evaluate
        self.grid: tuple[int, int, int] | None = None
        self.max_atoms = shell.chunk_rows if isinstance(shell.chunk_rows, int) else None
        self._measure = shell.chunk_rows == "auto"
        self.last_plan: ChunkPlan | None = None
        self._grid_hint: tuple[int, int, int] | None = None

    def views(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        n_targets: int,
    ) -> Iterator[tuple[HaloView, torch.Tensor]]:
        """The chunks holding one of the atoms `positions[:n_targets]` among environment atoms
        (the rest, e.g. a rank's ghosts), in `cell` (3, 3) periodic along `pbc` (3,): each
        chunk's view (`chunk_view`: its own targets owned) and its rows' positions, taken
        from `positions`. With no target, every row as one chunk (so every rank's outputs
        are alike)."""
        if n_targets:
            partitioner, images = self.cut(positions.detach(), atomic_numbers, cell, pbc, n_targets)
            self.last_plan = ChunkPlan.of(partitioner, images, n_targets)
            chunks = chunk_rows(partitioner, images, positions.detach(), n_targets)
            wrapped = partitioner.wrapped_axes
        else:
            whole = torch.arange(positions.shape[0], device=positions.device)
            chunks = iter([(whole, torch.zeros_like(positions, dtype=torch.long), 0)])
            wrapped = torch.zeros(3, dtype=torch.bool, device=positions.device)
        for chunk in chunks:
            if chunk[2] or not n_targets:
                yield chunk_view(positions, atomic_numbers, cell, wrapped, chunk, self.cutoff)

    def cut(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        pbc: torch.Tensor,
        n_targets: int,
    ) -> tuple[SpatialPartitioner, GhostImages]:
        """The grid of `views`' chunks (a fixed `grid`, or the fewest chunks whose rows all
        fit the row limit, counting only those holding a target) and the images each holds.
        Along open axes the chunks tile the span of the targets (the outermost reach past
        it, over their environment)."""
        open_axes = ~pbc.reshape(3, 1).bool().to(cell.device)
        spanned = torch.where(open_axes, torch.zeros_like(cell), cell)
        frame = DecompositionFrame.from_system(positions[:n_targets], spanned, pbc)
        if self.grid is not None:
            return partitioned(frame, positions, self.grid, self.width)
        limit = self._row_limit(positions, atomic_numbers, cell, frame)
        try:
            partitioner, images = fitting_chunks(
                frame, positions, n_targets, limit, self.width, self._grid_hint or (1, 1, 1)
            )
        except ValueError as err:
            raise ValueError(
                f"{err} (shell {self.n_layers} x {self.cutoff:g} Å): raise max_atoms"
            ) from None
        if self._grid_hint != tuple(partitioner.grid):
            logger.info("chunk grid %s for at most %d rows", partitioner.grid, limit)
        self._grid_hint = tuple(partitioner.grid)
        return partitioner, images

    def _row_limit(
        self,
        positions: torch.Tensor,
        atomic_numbers: torch.Tensor,
        cell: torch.Tensor,
        frame: DecompositionFrame,
    ) -> int:
        """The rows per chunk: given, measured on a GPU (`measured_row_limit`), or all."""
        if self.max_atoms is None and self._measure and positions.device.type == "cuda":
            leaf = positions.detach().requires_grad_(True)

            def probe(chunk: tuple[torch.Tensor, torch.Tensor, int], wrapped: torch.Tensor) -> None:
                view, rows = chunk_view(leaf, atomic_numbers, cell, wrapped, chunk, self.cutoff)
                pbc, to = view.wrapped_axes[None], IntoRows({}, leaf.shape[0])
                self.evaluate(view, leaf, rows, cell[None], pbc, Wanted(True, False), to)

            self.max_atoms = measured_row_limit(frame, positions, self.width, probe)
            logger.info("chunks of at most %d rows (from free device memory)", self.max_atoms)
        return self.max_atoms if self.max_atoms is not None else max(positions.shape[0], 1)
