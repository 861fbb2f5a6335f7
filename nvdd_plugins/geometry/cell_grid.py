"""The point set a neighbour-list search runs on: the atoms plus their periodic images near
the cell (`with_periodic_images`), binned on a Cartesian grid and sorted by bin, with each
atom's columns of candidate bins (`build_bin_grid`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch

from nvdd_plugins.native import bin_grid_native, periodic_images_native

from .cell import rows_times_3x3, wrap_in_complete_cell

__all__ = ["BinGrid", "PeriodicPoints", "build_bin_grid", "with_periodic_images"]

_MAX_BINS_PER_AXIS = 1 << 20


@dataclass(frozen=True, eq=False)
class PeriodicPoints:
    """Atoms plus the periodic images near the cell, ordered by (atom, image shift)."""

    atom: torch.Tensor  # (M,) int64 source atom of each point
    unit: torch.Tensor  # (M, 3) int64 lattice vectors from the atom as given to the point
    pos: torch.Tensor  # (M, 3) Cartesian position of each point
    image: torch.Tensor  # (N, 3) int64 lattice vectors removed from each atom by wrapping
    central: torch.Tensor  # (N,) index of each atom's unshifted copy among the points


def with_periodic_images(
    positions: torch.Tensor,
    full_cell: torch.Tensor | None,
    periodic: tuple[bool, bool, bool],
    widths: list[float],
    reach_distance: float,
) -> PeriodicPoints:
    """Wrap periodic axes and add every image whose slab distance to the cell is in reach."""
    n = positions.shape[0]
    device, dtype = positions.device, positions.dtype
    if full_cell is None:
        index = torch.arange(n, device=device)
        zeros = torch.zeros((n, 3), dtype=torch.int64, device=device)
        return PeriodicPoints(index, zeros, positions, zeros, index)

    frac, image, wrapped = wrap_in_complete_cell(positions, full_cell, periodic)

    half_range = [
        math.floor(reach_distance / widths[k]) + 1 if periodic[k] else 0 for k in range(3)
    ]
    reaches = [reach_distance / widths[k] if periodic[k] else 0.0 for k in range(3)]
    native = periodic_images_native(frac, wrapped, image, full_cell, periodic, half_range, reaches)
    if native is not None:  # the same points, in one loop of C
        atom, unit, pos, central = native
        return PeriodicPoints(atom, unit, pos, image, central)
    keep_axes = []
    for k in range(3):
        m = half_range[k]
        steps = torch.arange(-m, m + 1, device=device, dtype=dtype)
        reach = reach_distance / widths[k]
        f = frac[:, k : k + 1] + steps
        ok = (f > -reach) & (f < 1.0 + reach) if periodic[k] else torch.ones_like(f, dtype=bool)
        ok[:, m] = True
        keep_axes.append(ok)
    keep = keep_axes[0][:, :, None, None] & keep_axes[1][:, None, :, None]
    keep = (keep & keep_axes[2][:, None, None, :]).reshape(n, -1)

    points = keep.nonzero()
    sizes = [2 * m + 1 for m in half_range]
    code = points[:, 1]
    shift = torch.stack(
        (code // (sizes[1] * sizes[2]), (code // sizes[2]) % sizes[1], code % sizes[2]), dim=1
    ) - torch.tensor(half_range, device=device)
    atom = points[:, 0]
    pos = wrapped[atom] + rows_times_3x3(shift, full_cell)
    unit = shift - image.index_select(0, atom)

    per_atom = keep.sum(dim=1)
    zero_code = (half_range[0] * sizes[1] + half_range[1]) * sizes[2] + half_range[2]
    central = per_atom.cumsum(0) - per_atom + keep[:, :zero_code].sum(dim=1)
    return PeriodicPoints(atom, unit, pos, image, central)


@dataclass(frozen=True, eq=False)
class _Bins:
    """A Cartesian grid of bins over a point set: bin ``b`` on axis ``k`` holds the points with
    ``floor((x_k - lo_k) * scale_k) == b`` (clamped to the grid)."""

    lo: torch.Tensor  # (3,) lowest coordinate of the points
    scale: torch.Tensor  # (3,) bins per Å (0 on an axis with a single bin)
    width: torch.Tensor  # (3,) Å per bin
    shape: list[int]  # bins per axis

    def fractional(self, points: torch.Tensor) -> torch.Tensor:
        """Positions in units of bins from ``lo``, (M, 3)."""
        return (points - self.lo) * self.scale

    def coordinates(self, points: torch.Tensor) -> torch.Tensor:
        """Integer bin coordinates, (M, 3) int64."""
        top = torch.tensor([s - 1 for s in self.shape], device=points.device)
        coords = torch.floor(self.fractional(points)).to(torch.int64)
        return torch.minimum(coords.clamp_min(0), top)


def _make_bins(points: torch.Tensor, bin_size: float) -> _Bins:
    """The grid over ``points`` with bins at least ``bin_size`` wide (one host sync)."""
    lo = points.amin(dim=0)
    lo_host, hi_host = torch.stack((lo, points.amax(dim=0))).tolist()
    shape, scale, width = [], [], []
    for k in range(3):
        extent = hi_host[k] - lo_host[k]
        count = max(1, min(int(extent // bin_size), _MAX_BINS_PER_AXIS))
        shape.append(count)
        scale.append(count / extent if count > 1 else 0.0)
        width.append(extent / count)
    options = {"dtype": points.dtype, "device": points.device}
    return _Bins(
        lo=lo,
        scale=torch.tensor(scale, **options),
        width=torch.tensor(width, **options),
        shape=shape,
    )


def _linear_key(coords: torch.Tensor, shape: list[int]) -> torch.Tensor:
    return (coords[..., 0] * shape[1] + coords[..., 1]) * shape[2] + coords[..., 2]


def _axis_columns(
    centre: torch.Tensor, fractional: torch.Tensor, width: torch.Tensor, size: int, stencil: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Along one axis, the bins within ``stencil`` of each query's own: their index (Q, S)
    clamped to the grid, whether they exist, and the squared gap (Å²) from the query to them."""
    span = min(stencil, size - 1)
    index = centre[:, None] + torch.arange(-span, span + 1, device=centre.device)
    valid = (index >= 0) & (index < size)
    index = index.clamp(0, size - 1)
    lower = index.to(fractional.dtype)
    query = fractional[:, None]
    gap = torch.maximum(lower - query, query - (lower + 1.0)).clamp_min(0.0) * width
    return index, valid, gap * gap


@dataclass(frozen=True, eq=False)
class BinGrid:
    """The extended points in bin order and each query's candidate ranges among them."""

    start: torch.Tensor  # (Q, C) int32 first bin-sorted slot of each stencil column
    count: torch.Tensor  # (Q, C) int32 number of candidates in each stencil column
    sorted_pos: torch.Tensor  # (M, 3) positions in bin order
    sorted_atom: torch.Tensor  # (M,) int64 atom of each bin-sorted point
    sorted_unit: torch.Tensor  # (M, 3) int64 lattice vectors of each bin-sorted point
    own_slot: torch.Tensor  # (Q,) bin-sorted slot of each query's own point
    query_pos: torch.Tensor  # (Q, 3) position of each query's own point

    @cached_property
    def slot_pos(self) -> torch.Tensor:
        """(Q * C, 3) query position repeated for each column."""
        return self.query_pos.repeat_interleave(self.start.shape[1], dim=0)


def build_bin_grid(ext: PeriodicPoints, stencil: int, reach: float) -> BinGrid:
    """Bin the points and find, per query (each atom's own point), its candidate ranges.

    Bins that differ only in their z index are adjacent in the sort order, so a query needs one
    contiguous range per (x, y) column within ``stencil`` bins of its own. Each range is
    trimmed to the query's sphere: a column whose (x, y) rectangle is farther than ``reach`` is
    empty, and the others span only the z bins of the sphere's chord above that rectangle (a
    third fewer candidates than the full stencil). The bounds use ``reach``, which exceeds the
    cutoff by far more than the rounding of the bin coordinates.
    """
    bins = _make_bins(ext.pos, reach / stencil)
    native = bin_grid_native(
        ext.pos, ext.central, bins.lo, bins.scale, bins.width, bins.shape, stencil, reach
    )
    if native is not None:  # the same grid, in one loop of C
        order, own_slot, start, count = native
    else:
        order, own_slot, start, count = _torch_bin_grid(ext, bins, stencil, reach)
    return BinGrid(
        start=start,
        count=count,
        sorted_pos=ext.pos.index_select(0, order),
        sorted_atom=ext.atom.index_select(0, order),
        sorted_unit=ext.unit.index_select(0, order),
        own_slot=own_slot,
        query_pos=ext.pos.index_select(0, ext.central),
    )


def _torch_bin_grid(
    ext: PeriodicPoints, bins: _Bins, stencil: int, reach: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`bin_grid_native` in torch: the points' sort order, each query's own slot in it, and
    per query and stencil column the first slot and the count of candidates."""
    device = ext.pos.device
    shape = bins.shape
    coords = bins.coordinates(ext.pos)
    key = _linear_key(coords, shape)
    sorted_key, order = torch.sort(key, stable=True)

    query_pos = ext.pos.index_select(0, ext.central)
    fractional = bins.fractional(query_pos)
    centre = coords.index_select(0, ext.central)
    x_index, x_valid, x_gap = _axis_columns(
        centre[:, 0], fractional[:, 0], bins.width[0], shape[0], stencil
    )
    y_index, y_valid, y_gap = _axis_columns(
        centre[:, 1], fractional[:, 1], bins.width[1], shape[1], stencil
    )
    n_queries = query_pos.shape[0]
    gap_sq = (x_gap[:, :, None] + y_gap[:, None, :]).reshape(n_queries, -1)
    valid = (x_valid[:, :, None] & y_valid[:, None, :]).reshape(n_queries, -1)
    valid &= gap_sq < reach * reach
    half_chord = torch.sqrt((reach * reach - gap_sq).clamp_min(0.0)) * bins.scale[2]
    query_z = fractional[:, 2:3]
    z_first = torch.floor(query_z - half_chord).clamp(0, shape[2] - 1).to(torch.int64)
    z_last = torch.floor(query_z + half_chord).clamp(0, shape[2] - 1).to(torch.int64)
    base = (x_index[:, :, None] * (shape[1] * shape[2]) + y_index[:, None, :] * shape[2]).reshape(
        n_queries, -1
    )
    first, last = base + z_first, base + z_last

    n_bins = shape[0] * shape[1] * shape[2]
    if n_bins <= 4 * key.numel() + 1024:
        counts = torch.bincount(key, minlength=n_bins)
        bin_end = counts.cumsum(0).int()
        start, end = (bin_end - counts.int())[first], bin_end[last]
    else:
        start = torch.searchsorted(sorted_key, first, out_int32=True)
        end = torch.searchsorted(sorted_key, last, right=True, out_int32=True)
    count = torch.where(valid, end - start, 0)

    slot_of_point = torch.empty_like(order)
    slot_of_point[order] = torch.arange(order.numel(), device=device)
    return order, slot_of_point.index_select(0, ext.central), start, count
