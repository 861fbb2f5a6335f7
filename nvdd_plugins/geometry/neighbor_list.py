"""An O(N) cell-list neighbour list for open, periodic and mixed boundaries, any cell shape.

The list is *full* (both ``(i, j)`` and ``(j, i)``), with pair vectors
``r_ij = positions[j] - positions[i] + shifts[e]`` strictly shorter than the cutoff. Periodic
images are explicit, so a cutoff larger than the box yields several edges per atom pair and
self-image edges ``(i, i, n != 0)``.

Algorithm: wrap the periodic axes; replicate the periodic images that lie within the cutoff of
the cell (a slab test in fractional coordinates with the perpendicular widths); bin the
extended point set on a Cartesian grid with bins at least half a cutoff wide and sort it by
bin; for each atom take the 5 x 5 (x, y) columns of bins around its own, each trimmed to the
chord of the atom's cutoff sphere (one contiguous range of the sorted points per column),
enumerate the candidates with counts + ``repeat_interleave``, keep those within the cutoff
(screened on the extended positions with a small rounding margin, then decided exactly on
``positions[j] - positions[i] + shifts``). Everything is vectorised torch; candidates are
processed in memory-bounded chunks.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from .cell import (
    PbcLike,
    _as_pbc,
    complete_cell,
    perpendicular_widths,
    rows_times_3x3,
    wrap_in_complete_cell,
)

__all__ = ["NeighborList", "build_neighbor_list"]

_MAX_BINS_PER_AXIS = 1 << 20
_MAX_CANDIDATES_CPU = 1 << 24
# ~100 bytes per candidate (~115 candidates per atom for a dense metal): 2**27 (13 GiB) keeps a
# million atoms at 5 Å in one chunk on a large GPU, as each extra chunk costs host syncs and
# launches (one vs two chunks at 500k atoms: 19.7 vs 21.0 ms on an H200, before the stencil was
# trimmed); smaller GPUs use half.
_MAX_CANDIDATES_LARGE_GPU = 1 << 27
_MAX_CANDIDATES_GPU = 1 << 26
_LARGE_GPU_BYTES = 64 << 30
_BINS_PER_CUTOFF = 2


@dataclass(frozen=True, eq=False)
class NeighborList:
    """A full neighbour list in edge (COO) form.

    ``edge_index`` is (2, E) int64 with rows ``(i, j)``; ``unit_shifts`` is (E, 3) int64, the
    number of lattice vectors crossed; ``shifts`` is (E, 3) in Å, ``unit_shifts @ cell``
    (computed by ``rows_times_3x3``) in the positions' dtype. The pair vector is
    ``positions[j] - positions[i] + shifts[e]``. Edges are grouped by ``i`` in ascending order;
    within one ``i`` their order is that of the cell list (deterministic for given inputs, the
    same on every device and for any chunking).
    """

    edge_index: torch.Tensor
    unit_shifts: torch.Tensor
    shifts: torch.Tensor

    @property
    def num_edges(self) -> int:
        """Number of edges E."""
        return int(self.edge_index.shape[1])

    def edge_vectors(self, positions: torch.Tensor) -> torch.Tensor:
        """Pair vectors ``r_ij`` (Å), shape (E, 3), differentiable with respect to positions."""
        i, j = self.edge_index
        return positions[j] - positions[i] + self.shifts


@dataclass(frozen=True, eq=False)
class _Extended:
    """Atoms plus the periodic images near the cell, ordered by (atom, image shift)."""

    atom: torch.Tensor  # (M,) int64 source atom of each point
    unit: torch.Tensor  # (M, 3) int64 lattice vectors from the atom as given to the point
    pos: torch.Tensor  # (M, 3) Cartesian position of each point
    image: torch.Tensor  # (N, 3) int64 lattice vectors removed from each atom by wrapping
    central: torch.Tensor  # (N,) index of each atom's unshifted copy among the points


def _empty(dtype: torch.dtype, device: torch.device) -> NeighborList:
    return NeighborList(
        edge_index=torch.zeros((2, 0), dtype=torch.int64, device=device),
        unit_shifts=torch.zeros((0, 3), dtype=torch.int64, device=device),
        shifts=torch.zeros((0, 3), dtype=dtype, device=device),
    )


def _extend(
    positions: torch.Tensor,
    full_cell: torch.Tensor | None,
    periodic: tuple[bool, bool, bool],
    widths: list[float],
    reach_distance: float,
) -> _Extended:
    """Wrap periodic axes and add every image whose slab distance to the cell is in reach."""
    n = positions.shape[0]
    device, dtype = positions.device, positions.dtype
    if full_cell is None:
        index = torch.arange(n, device=device)
        zeros = torch.zeros((n, 3), dtype=torch.int64, device=device)
        return _Extended(index, zeros, positions, zeros, index)

    frac, image, wrapped = wrap_in_complete_cell(positions, full_cell, periodic)

    half_range = [
        math.floor(reach_distance / widths[k]) + 1 if periodic[k] else 0 for k in range(3)
    ]
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
    return _Extended(atom, unit, pos, image, central)


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
class _Grid:
    """The extended points in bin order and each query's candidate ranges among them."""

    start: torch.Tensor  # (Q, C) int32 first bin-sorted slot of each stencil column
    count: torch.Tensor  # (Q, C) int32 number of candidates in each stencil column
    sorted_pos: torch.Tensor  # (M, 3) positions in bin order
    sorted_atom: torch.Tensor  # (M,) int64 atom of each bin-sorted point
    sorted_unit: torch.Tensor  # (M, 3) int64 lattice vectors of each bin-sorted point
    own_slot: torch.Tensor  # (Q,) bin-sorted slot of each query's own point
    slot_pos: torch.Tensor  # (Q * C, 3) query position repeated for each column


def _build_grid(ext: _Extended, stencil: int, reach: float) -> _Grid:
    """Bin the points and find, per query (each atom's own point), its candidate ranges.

    Bins that differ only in their z index are adjacent in the sort order, so a query needs one
    contiguous range per (x, y) column within ``stencil`` bins of its own. Each range is
    trimmed to the query's sphere: a column whose (x, y) rectangle is farther than ``reach`` is
    empty, and the others span only the z bins of the sphere's chord above that rectangle (a
    third fewer candidates than the full stencil). The bounds use ``reach``, which exceeds the
    cutoff by far more than the rounding of the bin coordinates.
    """
    device = ext.pos.device
    bins = _make_bins(ext.pos, reach / stencil)
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
    return _Grid(
        start=start,
        count=count,
        sorted_pos=ext.pos.index_select(0, order),
        sorted_atom=ext.atom.index_select(0, order),
        sorted_unit=ext.unit.index_select(0, order),
        own_slot=slot_of_point.index_select(0, ext.central),
        slot_pos=query_pos.repeat_interleave(start.shape[1], dim=0),
    )


def _chunk_bounds(count_per_query: torch.Tensor, max_candidates: int) -> list[tuple[int, int, int]]:
    """Split queries into contiguous ranges of about ``max_candidates`` candidates each.

    Returns ``(first_query, end_query, n_candidates)`` triples (one host sync).
    """
    cumulative = count_per_query.cumsum(0)
    total = int(cumulative[-1])
    if total == 0:
        return []
    n_chunks = -(-total // max_candidates)
    targets = torch.arange(1, n_chunks, device=cumulative.device) * max_candidates
    bounds = torch.searchsorted(cumulative, targets, right=True)
    ends = torch.where(bounds > 0, cumulative[(bounds - 1).clamp_min(0)], 0)
    host = torch.cat((bounds, ends)).tolist()
    middle = zip(host[: n_chunks - 1], host[n_chunks - 1 :], strict=True)
    cuts = [(0, 0), *middle, (count_per_query.numel(), total)]
    return [(q0, q1, t1 - t0) for (q0, t0), (q1, t1) in itertools.pairwise(cuts) if t1 > t0]


def _chunk_edges(
    positions: torch.Tensor,
    cell: torch.Tensor | None,
    image: torch.Tensor,
    grid: _Grid,
    q0: int,
    q1: int,
    n_candidates: int,
    reach: float,
    cutoff: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(edge_index, unit_shifts, shifts)`` of the queries ``q0 <= i < q1``, in list order."""
    device = positions.device
    columns = grid.start.shape[1]
    counts = grid.count[q0:q1].reshape(-1)
    offset = grid.start[q0:q1].reshape(-1) - (counts.cumsum(0, dtype=torch.int32) - counts)
    # Candidate-sized index tensors in int32 (a chunk holds < 2**31 candidates and points):
    # half the memory traffic of the gathers that dominate the build.
    slot = torch.repeat_interleave(counts, output_size=n_candidates)
    point = torch.arange(n_candidates, device=device, dtype=torch.int32)
    point += offset.index_select(0, slot)
    delta = grid.sorted_pos.index_select(0, point)
    delta -= grid.slot_pos[q0 * columns :].index_select(0, slot)
    near = (delta.square_().sum(dim=1) < reach * reach).nonzero().squeeze(1)

    point = point.index_select(0, near)
    i = (slot.index_select(0, near) // columns + q0).long()
    j = grid.sorted_atom.index_select(0, point)
    unit = grid.sorted_unit.index_select(0, point) + image.index_select(0, i)
    if cell is None:
        shift = torch.zeros(unit.shape, dtype=positions.dtype, device=device)
    else:
        shift = rows_times_3x3(unit, cell)
    vectors = positions.index_select(0, j) - positions.index_select(0, i) + shift
    keep = (torch.linalg.vector_norm(vectors, dim=1) < cutoff) & (
        point != grid.own_slot.index_select(0, i)
    )
    keep = keep.nonzero().squeeze(1)
    edge_index = torch.stack((i.index_select(0, keep), j.index_select(0, keep)))
    return edge_index, unit.index_select(0, keep), shift.index_select(0, keep)


@torch.no_grad()
def _default_max_candidates(device: torch.device) -> int:
    if device.type != "cuda":
        return _MAX_CANDIDATES_CPU
    large = torch.cuda.get_device_properties(device).total_memory >= _LARGE_GPU_BYTES
    return _MAX_CANDIDATES_LARGE_GPU if large else _MAX_CANDIDATES_GPU


def build_neighbor_list(
    positions: torch.Tensor,
    cell: torch.Tensor | None,
    pbc: PbcLike,
    cutoff: float,
    *,
    max_candidates: int | None = None,
) -> NeighborList:
    """Full neighbour list of all pairs closer than ``cutoff`` (Å), with periodic images.

    ``positions`` (N, 3) Å, ``cell`` (3, 3) with lattice vectors as rows (may be ``None`` or
    zero when no axis is periodic; zero vectors on non-periodic axes are allowed), ``pbc``
    three bools. Works for triclinic cells, atoms outside the cell and cutoffs larger than the
    box (several images of a pair, self-images ``(i, i, n != 0)``). Runs in O(N) time for a
    bounded density. ``max_candidates`` bounds the candidate pairs held in memory at once
    (about 100 bytes each; default 2**24 on the CPU, 2**26 on a GPU, 2**27 on a GPU with at
    least 64 GiB).
    Indices are not differentiable and ``shifts`` is detached: for gradients with respect to
    the cell, recompute ``rows_times_3x3(unit_shifts, cell)``. Output keeps the input
    dtype/device.
    """
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dim() != 2 or positions.shape[1] != 3:
        raise ValueError(f"positions must have shape (N, 3), got {tuple(positions.shape)}")
    if not positions.is_floating_point():
        raise TypeError(f"positions must be a floating-point tensor, got {positions.dtype}")
    cutoff = float(cutoff)
    if not (math.isfinite(cutoff) and cutoff > 0.0):
        raise ValueError(f"cutoff must be a positive finite number, got {cutoff}")
    if max_candidates is not None and max_candidates < 1:
        raise ValueError(f"max_candidates must be positive, got {max_candidates}")
    periodic = _as_pbc(pbc)
    positions = positions.detach()
    dtype, device = positions.dtype, positions.device

    full_cell = None
    if cell is not None:
        cell = torch.as_tensor(cell, dtype=dtype, device=device).detach()
        if cell.shape != (3, 3):
            raise ValueError(f"cell must have shape (3, 3), got {tuple(cell.shape)}")
    if any(periodic):
        if cell is None:
            raise ValueError("a cell is required when an axis is periodic")
        full_cell = complete_cell(cell, periodic)

    n = positions.shape[0]
    if n == 0:
        return _empty(dtype, device)

    magnitude = float(positions.abs().amax())
    if not math.isfinite(magnitude):
        raise ValueError("positions must be finite")
    widths = [0.0, 0.0, 0.0]
    if full_cell is not None:
        cell_host = full_cell.to("cpu", torch.float64)
        widths = perpendicular_widths(cell_host).tolist()
        magnitude += 2.0 * float(torch.linalg.vector_norm(cell_host, dim=1).sum())
    eps = torch.finfo(dtype).eps
    reach = cutoff * (1.0 + 1e-6) + 256.0 * eps * (magnitude + 2.0 * cutoff)

    ext = _extend(positions, full_cell, periodic, widths, reach)
    grid = _build_grid(ext, _BINS_PER_CUTOFF, reach)
    if max_candidates is None:
        max_candidates = _default_max_candidates(device)
    lattice = cell if full_cell is not None else None
    chunks = [
        _chunk_edges(positions, lattice, ext.image, grid, q0, q1, n_candidates, reach, cutoff)
        for q0, q1, n_candidates in _chunk_bounds(grid.count.sum(dim=1), max_candidates)
    ]
    if not chunks:
        return _empty(dtype, device)
    if len(chunks) == 1:
        edge_index, unit_shifts, shifts = chunks[0]
    else:
        edge_index = torch.cat([chunk[0] for chunk in chunks], dim=1)
        unit_shifts = torch.cat([chunk[1] for chunk in chunks])
        shifts = torch.cat([chunk[2] for chunk in chunks])
    return NeighborList(edge_index=edge_index, unit_shifts=unit_shifts, shifts=shifts)
