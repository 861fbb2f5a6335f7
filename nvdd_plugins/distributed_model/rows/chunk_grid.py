"""Cutting one system into spatial chunks, each with a ghost shell: the row limit a GPU's
free memory allows, the grid that fits it, the rows of each chunk, and the plan that reports
them."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from nvdd_plugins.decomposition import DecompositionFrame, GhostImages, SpatialPartitioner

__all__ = [
    "WARNED_WORK",
    "ChunkPlan",
    "chunk_rows",
    "fitting_chunks",
    "measured_row_limit",
    "partitioned",
]

logger = logging.getLogger(__name__)

Grid = tuple[int, int, int]
# Share of the free device memory a chunk may use when the chunk size is chosen for the user.
_MEMORY_FRACTION = 0.8
_PROBE_ROWS = 4096
# Rows the chunks evaluate, relative to the system in one piece (its own shell of periodic
# images or a rank's ghosts included), beyond which a new grid is reported: the chunks'
# ghost shells are then most of the work.
WARNED_WORK = 2.0


@dataclass(frozen=True)
class ChunkPlan:
    """How a system is cut into chunks.

    Attributes:
        grid: chunks per axis.
        rows: rows (owned atoms + ghost images) of each chunk evaluated (one that owns
            atoms).
        n_atoms: atoms evaluated.
    """

    grid: tuple[int, int, int]
    rows: tuple[int, ...]
    n_atoms: int

    @classmethod
    def of(cls, partitioner: SpatialPartitioner, images: GhostImages, n_targets: int) -> ChunkPlan:
        """The plan of chunks `partitioner` holding `images`, `n_targets` atoms to evaluate:
        the rows of every chunk that holds one of them."""
        size = partitioner.world_size
        rows = torch.bincount(images.ranks, minlength=size)
        targets = torch.bincount(images.ranks[images.rows < n_targets], minlength=size)
        return cls(tuple(partitioner.grid), tuple(rows[targets > 0].tolist()), n_targets)

    @property
    def redundancy(self) -> float:
        """Rows evaluated per atom of the system, minus one: the shell's extra work."""
        return self.work - 1.0

    @property
    def work(self) -> float:
        """Rows evaluated per atom of the system."""
        return sum(self.rows) / max(self.n_atoms, 1)


def partitioned(
    frame: DecompositionFrame, positions: torch.Tensor, grid: Grid, shell: float
) -> tuple[SpatialPartitioner, GhostImages]:
    """The chunks of `frame` on `grid` with ghost shells `shell` Å thick, and the images of
    `positions` each holds."""
    partitioner = SpatialPartitioner(frame, math.prod(grid), tuple(grid), halo_width=shell)
    return partitioner, partitioner.domain_images(positions)


def fitting_chunks(
    frame: DecompositionFrame,
    positions: torch.Tensor,
    n_targets: int,
    limit: int,
    shell: float,
    start: Grid = (1, 1, 1),
) -> tuple[SpatialPartitioner, GhostImages]:
    """Chunks whose rows all fit `limit`, counting only chunks that hold one of the first
    `n_targets` atoms: from `start` (e.g. the last grid that fitted), the longest chunk edge
    is split until they fit. A new grid whose chunks evaluate more than `WARNED_WORK` times
    the rows of the system in one piece is reported with the limit that keeps within it.
    Raises ValueError when the shell alone is too big."""
    widths = frame.widths.tolist()
    grid = list(start)
    one_piece = None  # rows per atom of the system in one piece, once a new grid is sought
    within = None  # the largest chunk of the finest grid tried within WARNED_WORK
    while True:
        partitioner, images = partitioned(frame, positions, tuple(grid), shell)
        plan = ChunkPlan.of(partitioner, images, n_targets)
        largest = max(plan.rows, default=0)
        if one_piece is None:
            if largest <= limit:
                return partitioner, images
            whole = partitioned(frame, positions, (1, 1, 1), shell)
            one_piece = ChunkPlan.of(*whole, n_targets).work
        cost = plan.work / one_piece
        within = largest if cost <= WARNED_WORK else within
        if largest <= limit:
            if cost > WARNED_WORK:
                logger.warning(
                    "chunks of at most %d rows: grid %s evaluates %d rows for %d atoms, %.1fx "
                    "the system in one piece; the ghost shells (%g Å) dominate%s",
                    limit,
                    tuple(grid),
                    sum(plan.rows),
                    n_targets,
                    cost,
                    shell,
                    f"; chunks of {within} rows keep it within {WARNED_WORK:g}x" if within else "",
                )
            return partitioner, images
        edges = [w / g for w, g in zip(widths, grid, strict=True)]
        axis = max(range(3), key=edges.__getitem__)
        if edges[axis] < 0.125 * shell:  # more chunks no longer help: the shell dominates
            raise ValueError(
                f"chunks of at most {limit} rows are not possible: a chunk with its ghost "
                f"shell keeps {largest} rows"
            )
        grid[axis] = max(grid[axis] + 1, int(grid[axis] * min(2.0, largest / limit)))


def measured_row_limit(
    frame: DecompositionFrame,
    positions: torch.Tensor,
    shell: float,
    evaluate: Callable[[tuple[torch.Tensor, torch.Tensor, int], torch.Tensor], object],
) -> int:
    """Rows per chunk that fit in a share of the GPU memory free for tensors, from the peak
    memory of `evaluate(chunk, wrapped_axes)` on one probe chunk (a `chunk_rows` item) of
    about `_PROBE_ROWS` atoms of its own, a cube."""
    device, widths = positions.device, frame.widths
    edge = (float(widths.prod()) * _PROBE_ROWS / max(positions.shape[0], 1)) ** (1 / 3)
    grid = tuple(max(1, round(w / edge)) for w in widths.tolist())
    partitioner, images = partitioned(frame, positions, grid, shell)
    chunk = next(chunk_rows(partitioner, images, positions, positions.shape[0]))
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    evaluate(chunk, partitioner.wrapped_axes)
    per_row = (torch.cuda.max_memory_allocated(device) - base) / max(chunk[0].shape[0], 1)
    # the probe's blocks stay cached by the allocator: free for the chunks too
    free, _ = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(_PROBE_ROWS, int(_MEMORY_FRACTION * (free + cached) / max(per_row, 1.0)))


def chunk_rows(
    partitioner: SpatialPartitioner, images: GhostImages, positions: torch.Tensor, n_targets: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
    """Per chunk: its rows' atoms and image units, its own targets' (atoms below
    `n_targets`) home images first, and the number of those."""
    owner = partitioner.rank_of(positions)
    _, wrap = partitioner.home_fractional(positions)
    home = (
        (owner.index_select(0, images.rows) == images.ranks)
        & (images.units == -wrap.index_select(0, images.rows)).all(dim=1)
        & (images.rows < n_targets)
    )
    counts = torch.bincount(images.ranks, minlength=partitioner.world_size).tolist()
    start = 0
    for count in counts:
        members = slice(start, start + count)
        start += count
        owned = home[members]
        order = torch.argsort((~owned).to(torch.int8), stable=True)
        yield images.rows[members][order], images.units[members][order], int(owned.sum())
