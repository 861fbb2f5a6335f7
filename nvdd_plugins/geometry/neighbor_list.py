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
processed in memory-bounded chunks. On the CPU the periodic images, the bin grid and the
candidate scan, most of the build, run as loops of native C (`nvdd_plugins.native`) when that
library loads: same edges, same order.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from nvdd_plugins.native import PairSearch, neighbor_pairs_native

from .cell import PbcLike, _as_pbc, complete_cell, perpendicular_widths, rows_times_3x3
from .cell_grid import build_bin_grid, with_periodic_images

__all__ = ["NeighborList", "build_neighbor_list"]

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


def _empty(dtype: torch.dtype, device: torch.device) -> NeighborList:
    return NeighborList(
        edge_index=torch.zeros((2, 0), dtype=torch.int64, device=device),
        unit_shifts=torch.zeros((0, 3), dtype=torch.int64, device=device),
        shifts=torch.zeros((0, 3), dtype=dtype, device=device),
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
    search: PairSearch, q0: int, q1: int, n_candidates: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(edge_index, unit_shifts, shifts)`` of the queries ``q0 <= i < q1`` with ``i`` or
    ``j`` below ``search.touching``, in list order."""
    positions, cell, grid, reach = search.positions, search.cell, search.grid, search.reach
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
    unit = grid.sorted_unit.index_select(0, point) + search.image.index_select(0, i)
    if cell is None:
        shift = torch.zeros(unit.shape, dtype=positions.dtype, device=device)
    else:
        shift = rows_times_3x3(unit, cell)
    vectors = positions.index_select(0, j) - positions.index_select(0, i) + shift
    keep = (torch.linalg.vector_norm(vectors, dim=1) < search.cutoff) & (
        point != grid.own_slot.index_select(0, i)
    )
    touching = search.touching
    if touching < positions.shape[0]:
        keep &= (i < touching) | (j < touching)
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
    touching: int | None = None,
) -> NeighborList:
    """Full neighbour list of all pairs closer than ``cutoff`` (Å), with periodic images.

    ``positions`` (N, 3) Å, ``cell`` (3, 3) with lattice vectors as rows (may be ``None`` or
    zero when no axis is periodic; zero vectors on non-periodic axes are allowed), ``pbc``
    three bools. Works for triclinic cells, atoms outside the cell and cutoffs larger than the
    box (several images of a pair, self-images ``(i, i, n != 0)``). Runs in O(N) time for a
    bounded density. ``max_candidates`` bounds the candidate pairs held in memory at once
    (about 100 bytes each; default 2**24 on the CPU, 2**26 on a GPU, 2**27 on a GPU with at
    least 64 GiB). With ``touching``, only the pairs with an atom below that index are listed
    (a domain's owned atoms come first, and pairs between two ghosts are not needed).
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
    touching = n if touching is None else min(int(touching), n)

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

    ext = with_periodic_images(positions, full_cell, periodic, widths, reach)
    grid = build_bin_grid(ext, _BINS_PER_CUTOFF, reach)
    lattice = cell if full_cell is not None else None
    search = PairSearch(positions, lattice, ext.image, grid, reach, cutoff, touching)
    native = neighbor_pairs_native(search)
    if native is not None:
        return NeighborList(*native)
    if max_candidates is None:
        max_candidates = _default_max_candidates(device)
    chunks = [
        _chunk_edges(search, q0, q1, n_candidates)
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
