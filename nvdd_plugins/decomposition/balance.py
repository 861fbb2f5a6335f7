"""Load balancing: staggered cuts that give every sub-domain the same weight of atoms.

Per axis, in order, the cuts are weighted quantiles of the atoms' fractional coordinates:
the first axis's cuts from the histogram of all atoms, the second axis's from the
histogram of each slab of the first, the third's from each column. Histograms have
`BINS` bins per axis, over [0, 1) on a periodic axis and over the frame and every atom
beyond it on an open one, and are reduced over the ranks by the caller's `reduce` (an
all-reduce, or `in_one_process` where one process holds every atom), so every rank
computes the same cuts. A cut lies on a bin edge, in the middle of the run of edges that
is nearest to the target weight, so a cut in a gap between atoms sits mid-gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch

from nvdd_plugins.decomposition.cuts import StaggeredCuts
from nvdd_plugins.decomposition.grid import choose_rank_grid
from nvdd_plugins.decomposition.partitioner import SpatialPartitioner

__all__ = [
    "BINS",
    "Reduce",
    "balanced_cuts",
    "imbalance",
    "in_one_process",
    "owned_counts",
    "rebalanced",
    "row_counts",
]

logger = logging.getLogger(__name__)

BINS = 16384  # per axis: cuts to 1/16384 of the box (0.004 Å in a 60 Å box)
REFINEMENTS = 4  # rounds of cuts weighted by a counted cost (`rebalanced`)

Reduce = Callable[[torch.Tensor, str], torch.Tensor]
"""Reduces a tensor over the ranks with "sum", "min" or "max" (a communicator's
`all_reduce`; `in_one_process` when one process holds all atoms)."""


def in_one_process(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """The `Reduce` of a single process holding every atom: the tensor itself."""
    return tensor


def imbalance(counts: torch.Tensor) -> float:
    """max / mean of per-rank weights (1.0 when there is nothing to weigh)."""
    total = float(counts.sum())
    return float(counts.max()) * counts.numel() / total if total > 0 else 1.0


def _bins(coord: torch.Tensor) -> torch.Tensor:
    """Histogram bin of fractional coordinates (clamped into [0, 1])."""
    return (coord.clamp(0.0, 1.0) * BINS).long().clamp(max=BINS - 1)


def _histograms(
    groups: torch.Tensor, coord: torch.Tensor, weights: torch.Tensor, n: int, reduce: Reduce
) -> torch.Tensor:
    """(n, BINS) weight histograms of `coord`, one per group, summed over the ranks."""
    flat = groups * BINS + _bins(coord)
    local = torch.bincount(flat, weights=weights, minlength=n * BINS).to(torch.float64)
    return reduce(local, "sum").reshape(n, BINS)


def _quantile_cuts(histograms: torch.Tensor, parts: int) -> torch.Tensor:
    """(G, parts + 1) cuts splitting each histogram's weight into `parts` equal shares."""
    groups = histograms.shape[0]
    edges = torch.cat([histograms.new_zeros(groups, 1), histograms.cumsum(dim=1)], dim=1)
    totals = edges[:, -1:]
    targets = totals * torch.arange(1, parts, dtype=torch.float64) / parts  # (G, parts - 1)
    cuts = torch.arange(parts + 1, dtype=torch.float64).repeat(groups, 1) / parts
    for g in torch.nonzero(totals.flatten() > 0).flatten().tolist():
        above = torch.searchsorted(edges[g], targets[g]).clamp(max=BINS)
        below = (above - 1).clamp(min=0)
        nearer_below = (targets[g] - edges[g][below]) <= (edges[g][above] - targets[g])
        value = edges[g][torch.where(nearer_below, below, above)]
        first = torch.searchsorted(edges[g], value)  # the run of edges at that weight
        last = torch.searchsorted(edges[g], value, right=True) - 1
        cuts[g, 1:-1] = (first + last).to(torch.float64) / (2 * BINS)
    return cuts


def _extent(histogram: torch.Tensor, periodic: bool) -> tuple[float, float]:
    """(fraction of an axis the atoms occupy, largest empty fraction inside or across the
    periodic face): from the first to the last occupied bin, or on a periodic axis the axis
    less its largest empty run (which may wrap)."""
    occupied = torch.nonzero(histogram > 0).flatten()
    if occupied.numel() == 0:
        return 1.0, 0.0
    if not periodic:
        return float(occupied[-1] - occupied[0] + 1) / BINS, 1.0
    gaps = torch.cat([occupied.diff(), (occupied[:1] + BINS - occupied[-1:])]) - 1
    return 1.0 - float(gaps.max()) / BINS, float(gaps.max()) / BINS


def _busiest_rows(parts: int, extent: float, width: float, gap: float, halo: float) -> float:
    """Length (Å) of the busiest sub-domain plus its ghost shell along one axis cut into
    `parts` slices of `extent` Å: an unsplit axis needs ghosts only as periodic self-images
    of a narrow box; a split axis whose atoms wrap across the periodic face has neighbours on
    both sides of every slice, one whose atoms end at a gap (open, or vacuum wider than the
    shell) only one side of its two outer slices."""
    wraps = gap * width < halo
    if parts == 1:
        return extent + (2 * halo if wraps and width <= 2 * halo else 0.0)
    sides = 2 if wraps or parts > 2 else 1
    return extent / parts + sides * halo


def _grid_for(
    world_size: int, extents: Sequence[tuple[float, float]], widths: Sequence[float], halo: float
) -> tuple[int, int, int]:
    """The grid whose busiest sub-domain holds the fewest owned + ghost rows (for a uniform
    density in the occupied region; `extents` as `_extent` gives them); ties: the
    minimal-surface grid."""
    best: tuple[float, tuple[int, int, int]] | None = None
    surface_grid = choose_rank_grid(
        world_size, [e * w for (e, _), w in zip(extents, widths, strict=True)]
    )
    for px in range(1, world_size + 1):
        for py in range(1, world_size // px + 1):
            if world_size % (px * py):
                continue
            grid = (px, py, world_size // (px * py))
            rows = 1.0
            for parts, (extent, gap), width in zip(grid, extents, widths, strict=True):
                rows *= _busiest_rows(parts, extent * width, width, gap, halo)
            key = (round(rows, 6), grid != surface_grid)
            if best is None or key < (round(best[0], 6), best[1] != surface_grid):
                best = (rows, grid)
    assert best is not None
    return best[1]


def _ranges(
    home: torch.Tensor, pbc: Sequence[bool], reduce: Reduce
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per axis, the interval the histograms cover: [0, 1] on a periodic axis, on an open
    one also every atom beyond the frame (atoms may leave it after the frame was fixed)."""
    inf = torch.full((3,), torch.inf, dtype=torch.float64)
    low = home.min(dim=0).values if home.shape[0] else inf
    high = home.max(dim=0).values if home.shape[0] else -inf
    extremes = reduce(torch.cat([-low, high]), "max")
    periodic = torch.tensor([bool(p) for p in pbc])
    lo = torch.where(periodic, 0.0, torch.clamp(-extremes[:3], max=0.0))
    hi = torch.where(periodic, 1.0, torch.clamp(extremes[3:], min=1.0))
    return lo, hi


def balanced_cuts(
    home: torch.Tensor,
    weights: torch.Tensor,
    world_size: int,
    widths: Sequence[float],
    pbc: Sequence[bool],
    reduce: Reduce,
    grid: tuple[int, int, int] | None = None,
    halo_width: float = 0.0,
) -> StaggeredCuts:
    """Staggered cuts giving `world_size` sub-domains equal shares of `weights` (CPU).

    `home`: (N, 3) fractional coordinates of this rank's atoms (wrapped on periodic axes);
    `weights`: (N,) their cost; `widths`: the frame's perpendicular widths (Å). Without a
    `grid`, the grid whose busiest sub-domain has the fewest owned + ghost rows (ghost shell
    `halo_width` Å) for the region the atoms occupy, so a slab in vacuum is not cut across
    its thin axis. Collective through `reduce`.
    """
    home = home.detach().cpu().to(torch.float64)
    weights = weights.detach().cpu().to(torch.float64)
    lo, hi = _ranges(home, pbc, reduce)
    scaled = (home - lo) / (hi - lo)  # histogram coordinates: [0, 1] on every axis
    none = torch.zeros(home.shape[0], dtype=torch.long)
    x_histogram = _histograms(none, scaled[:, 0], weights, 1, reduce)
    if grid is None:
        marginals = [x_histogram[0]] + [
            _histograms(none, scaled[:, a], weights, 1, reduce)[0] for a in (1, 2)
        ]
        extents = [_extent(h, bool(p)) for h, p in zip(marginals, pbc, strict=True)]
        spans = [float(w) * float(h - low) for w, low, h in zip(widths, lo, hi, strict=True)]
        grid = _grid_for(world_size, extents, spans, halo_width)
    px, py, pz = grid

    def unscaled(cuts: torch.Tensor, axis: int) -> torch.Tensor:
        cuts = lo[axis] + cuts * (hi[axis] - lo[axis])
        cuts[..., 0], cuts[..., -1] = lo[axis], hi[axis]  # exactly, not to rounding
        return cuts

    x = unscaled(_quantile_cuts(x_histogram, px)[0], 0)
    i = torch.searchsorted(x[1:-1].contiguous(), home[:, 0].contiguous(), right=True)
    y = unscaled(_quantile_cuts(_histograms(i, scaled[:, 1], weights, px, reduce), py), 1)
    j = torch.searchsorted(y[i][:, 1:-1].contiguous(), home[:, 1:2].contiguous(), right=True)
    column = i * py + j.squeeze(-1)
    z_histograms = _histograms(column, scaled[:, 2], weights, px * py, reduce)
    z = unscaled(_quantile_cuts(z_histograms, pz), 2)
    cuts = StaggeredCuts(x, y, z.reshape(px, py, pz + 1))
    cuts.check()
    return cuts


def owned_counts(
    partitioner: SpatialPartitioner, positions: torch.Tensor, reduce: Reduce
) -> torch.Tensor:
    """Atoms each rank owns (float64, CPU) under `partitioner`, of `positions` summed by
    `reduce`."""
    owners = partitioner.rank_of(positions.detach()).cpu()
    counts = torch.bincount(owners, minlength=partitioner.world_size).to(torch.float64)
    return reduce(counts, "sum")


def row_counts(
    partitioner: SpatialPartitioner, positions: torch.Tensor, reduce: Reduce
) -> torch.Tensor:
    """Rows each rank's sub-domain holds under `partitioner` (float64, CPU): its owned atoms
    plus their ghost images (periodic self-images included), of `positions` summed by
    `reduce` — the rows a model evaluates on each rank."""
    images = partitioner.domain_images(positions.detach())
    rows = torch.bincount(images.ranks.cpu(), minlength=partitioner.world_size)
    return reduce(rows.to(torch.float64), "sum")


def _weighted_cuts(
    partitioner: SpatialPartitioner,
    positions: torch.Tensor,
    costs: torch.Tensor,
    reduce: Reduce,
    grid: tuple[int, int, int] | None,
) -> tuple[SpatialPartitioner, torch.Tensor]:
    """The partitioner of the cuts giving every rank an equal share of `costs` (per rank
    under `partitioner`) spread evenly over each rank's owned atoms, and those per-atom
    weights of `positions`."""
    frame, size = partitioner.frame, partitioner.world_size
    owners = partitioner.rank_of(positions.detach()).cpu()
    counts = reduce(torch.bincount(owners, minlength=size).to(torch.float64), "sum")
    weights = (costs / counts.clamp(min=1.0))[owners]
    home, _ = partitioner.home_fractional(positions.detach())
    widths, pbc = frame.widths.tolist(), frame.pbc.tolist()
    cuts = balanced_cuts(home, weights, size, widths, pbc, reduce, grid, partitioner.halo_width)
    return SpatialPartitioner(frame, size, None, partitioner.halo_width, cuts), weights


def rebalanced(
    partitioner: SpatialPartitioner,
    positions: torch.Tensor,
    costs: torch.Tensor,
    threshold: float,
    reduce: Reduce,
    grid: tuple[int, int, int] | None = None,
    cost_of: Callable[[SpatialPartitioner], torch.Tensor] | None = None,
) -> StaggeredCuts | None:
    """New cuts when the ranks' `costs` under `partitioner` (one per rank, the same on every
    rank: owned atoms, rows, or measured seconds) are more unequal than `threshold`
    (max / mean) and new cuts (of `grid`, or the grid of the occupied region) lower the
    busiest rank's cost; else None. `positions` are this rank's atoms, summed over the
    ranks by `reduce`.

    A rank's cost is spread evenly over the atoms it owns (as LAMMPS's `fix balance` weighs
    by time) and the cuts give every rank an equal share of that weight. A cost that can be
    counted for any cuts (`cost_of`: owned atoms, rows) starts from equal atoms and is then
    refined, up to `REFINEMENTS` times, by the weights of its own previous cuts, keeping the
    best; a measured one (no `cost_of`) takes one step, its cost predicted from the weights.
    """
    costs = costs.detach().cpu().to(torch.float64)
    if imbalance(costs) <= threshold:
        return None
    if cost_of is None:
        candidate, weights = _weighted_cuts(partitioner, positions, costs, reduce, grid)
        owners = candidate.rank_of(positions.detach()).cpu()
        shares = torch.bincount(owners, weights, partitioner.world_size)
        after = reduce(shares.to(torch.float64), "sum")
        logger.info("cost max/mean %.3f -> %.3f (predicted)", imbalance(costs), imbalance(after))
        return candidate.cuts.to("cpu") if float(after.max()) < float(costs.max()) else None
    best, lowest = None, float(costs.max())
    current, current_costs = partitioner, owned_counts(partitioner, positions, reduce)
    for _ in range(REFINEMENTS):
        current, _ = _weighted_cuts(current, positions, current_costs, reduce, grid)
        current_costs = cost_of(current).detach().cpu().to(torch.float64)
        if float(current_costs.max()) < lowest:
            best, lowest = current.cuts.to("cpu"), float(current_costs.max())
        if imbalance(current_costs) <= threshold:
            break
    logger.info("cost max/mean %.3f -> busiest %.1f", imbalance(costs), lowest)
    return best
