"""Tensor-level entry points of the native kernels: None where they do not apply (no
library, `NVDD_NATIVE=0`, a tensor off the CPU or not float32/float64), so callers fall back to
their torch code."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import torch

from .blocks import BlockPool
from .build import native_enabled, native_library

__all__ = [
    "PairSearch",
    "bin_grid_native",
    "lennard_jones_native",
    "neighbor_pairs_native",
    "periodic_images_native",
]

_SUFFIX = {torch.float64: "f64", torch.float32: "f32"}
# the neighbour search's outputs: edge pairs, lattice units, Cartesian shifts
_PAIRS, _UNITS, _SHIFTS = BlockPool(), BlockPool(), BlockPool()


def _function(name: str, *tensors: torch.Tensor) -> ctypes._CFuncPtr | None:
    dtype = tensors[0].dtype
    if dtype not in _SUFFIX or any(t.device.type != "cpu" for t in tensors):
        return None
    if not native_enabled():
        return None
    return getattr(native_library(), f"{name}_{_SUFFIX[dtype]}")


def _address(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


def periodic_images_native(
    frac: torch.Tensor,
    wrapped: torch.Tensor,
    image: torch.Tensor,
    cell: torch.Tensor,
    periodic: tuple[bool, bool, bool],
    half_range: list[int],
    reach: list[float],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """`geometry.cell_grid.with_periodic_images`'s points of the wrapped atoms (`frac`,
    `wrapped`, `image`) in `cell`: (atom, unit, pos, central) for every lattice shift within
    `half_range` whose fractional coordinate on each periodic axis k lies strictly between
    -`reach[k]` and 1 + `reach[k]`; None where the native code does not apply."""
    function = _function("nvdd_periodic_images", frac, wrapped, cell)
    if function is None:
        return None
    dtype = frac.dtype
    frac, wrapped = frac.contiguous(), wrapped.contiguous()
    image, cell = image.to(torch.int64).contiguous(), cell.to(dtype).contiguous()
    half = torch.tensor(half_range, dtype=torch.int64)
    axes = torch.tensor(periodic, dtype=torch.int64)
    # the bounds rounded to the dtype, as torch compares a tensor with a Python number
    lo = torch.tensor([-r for r in reach], dtype=dtype)
    hi = torch.tensor([1.0 + r for r in reach], dtype=dtype)
    n = frac.shape[0]
    inputs = [t.data_ptr() for t in (frac, wrapped, image, cell, half, axes, lo, hi)]
    m = function(n, *inputs, None, None, None, None)
    atom = torch.empty(m, dtype=torch.int64)
    unit = torch.empty(m, 3, dtype=torch.int64)
    pos = torch.empty(m, 3, dtype=dtype)
    central = torch.empty(n, dtype=torch.int64)
    function(n, *inputs, *(t.data_ptr() for t in (atom, unit, pos, central)))
    return atom, unit, pos, central


def bin_grid_native(
    points: torch.Tensor,
    central: torch.Tensor,
    lo: torch.Tensor,
    scale: torch.Tensor,
    width: torch.Tensor,
    shape: list[int],
    stencil: int,
    reach: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """`geometry.cell_grid.build_bin_grid`'s search structure on the grid `lo`, `scale`,
    `width`, `shape`: (bin order of the points, each query's slot in it, (Q, C) int32 first
    slot and count of each stencil column); None where the native code does not apply (also
    for grids of more than 4 M + 1024 bins)."""
    function = _function("nvdd_bin_grid", points, lo, scale, width)
    n_bins = shape[0] * shape[1] * shape[2]
    if function is None or n_bins > 4 * points.shape[0] + 1024:
        return None
    points, central = points.contiguous(), central.to(torch.int64).contiguous()
    grid = [t.to(points.dtype).contiguous() for t in (lo, scale, width)]
    columns = (2 * min(stencil, shape[0] - 1) + 1) * (2 * min(stencil, shape[1] - 1) + 1)
    n_queries = central.shape[0]
    order = torch.empty(points.shape[0], dtype=torch.int64)
    own_slot = torch.empty(n_queries, dtype=torch.int64)
    start = torch.empty(n_queries, columns, dtype=torch.int32)
    count = torch.empty(n_queries, columns, dtype=torch.int32)
    status = function(
        points.shape[0],
        points.data_ptr(),
        n_queries,
        central.data_ptr(),
        *(t.data_ptr() for t in grid),
        *shape,
        stencil,
        reach,
        *(t.data_ptr() for t in (order, own_slot, start, count)),
    )
    if status != 0:
        raise MemoryError("native bin grid: out of memory")
    return order, own_slot, start, count


@dataclass(frozen=True)
class PairSearch:
    """One neighbour search as `geometry.neighbor_list` sets it up: the atoms' `positions`,
    the `cell` (None without periodic axes), each extended point's lattice `image`, the
    `grid` (geometry's `BinGrid`), the candidate `reach` and the `cutoff` (Å), and
    `touching` (pairs with an end below it are kept)."""

    positions: torch.Tensor
    cell: torch.Tensor | None
    image: torch.Tensor
    grid: Any
    reach: float
    cutoff: float
    touching: int


def neighbor_pairs_native(
    search: PairSearch,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """`(edge_index, unit_shifts, shifts)` of every query of the search's grid with an end
    below `touching`, in the order of `geometry.neighbor_list`'s vectorised search; None where
    the native code does not apply."""
    grid, positions, cell = search.grid, search.positions, search.cell
    sorted_pos, query_pos = grid.sorted_pos, grid.query_pos
    function = _function("nvdd_neighbor_pairs", positions, sorted_pos, query_pos)
    if function is None or sorted_pos.dtype != positions.dtype:
        return None
    start, count = grid.start.contiguous().int(), grid.count.contiguous().int()
    arrays = [sorted_pos, query_pos, grid.sorted_atom, grid.sorted_unit, grid.own_slot]
    arrays += [search.image, positions]
    arrays = [a.contiguous() for a in arrays]
    if cell is not None:
        cell = cell.to(positions.dtype).contiguous()
    n_queries, columns = start.shape
    head = (0, n_queries, columns, search.touching, start.data_ptr(), count.data_ptr())
    inputs = (*head, *(a.data_ptr() for a in arrays), _address(cell), search.reach, search.cutoff)
    # Room for every candidate: only the rows written are ever paged in; the results are views
    # of their first rows.
    room = int(count.sum())
    pairs = _PAIRS.take(2 * room, 1, torch.int64).view(-1)
    units = _UNITS.take(room, 3, torch.int64)
    vectors = _SHIFTS.take(room, 3, positions.dtype)
    n_edges = function(*inputs, *(t.data_ptr() for t in (pairs, units, vectors)))
    edge_index = pairs[: 2 * n_edges].view(2, n_edges)
    unit_shifts, shifts = units[:n_edges], vectors[:n_edges]
    return edge_index, unit_shifts, shifts


def lennard_jones_native(
    positions: torch.Tensor,
    edge_index: torch.Tensor,
    shifts: torch.Tensor,
    epsilon: float,
    sigma: float,
    cutoff: float,
    offset: float,
    virials: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Per-atom LJ energies, forces and virials as `kernels.lennard_jones` defines them
    (`offset`: the pair energy subtracted inside the cutoff; without `virials` they are not
    computed and come back as an empty (0, 3, 3) tensor); None where the native code does
    not apply. Raises IndexError for an edge index outside the atoms."""
    function = _function("nvdd_lennard_jones", positions, shifts)
    if function is None or shifts.dtype != positions.dtype:
        return None
    positions, shifts = positions.detach().contiguous(), shifts.detach().contiguous()
    edge_index = edge_index.to(torch.int64).contiguous()
    n, n_edges = positions.shape[0], edge_index.shape[1]
    energies = positions.new_zeros(n)
    forces = positions.new_zeros(n, 3)
    per_atom_virials = positions.new_zeros(n if virials else 0, 3, 3)
    tensors = (positions, edge_index[0], edge_index[1], shifts)
    parameters = (epsilon, sigma, cutoff, offset)
    outputs = (energies, forces, per_atom_virials if virials else None)
    addresses = (_address(t) for t in outputs)
    bad = function(n, n_edges, *(t.data_ptr() for t in tensors), *parameters, *addresses)
    if bad >= 0:
        pair = edge_index[:, bad].tolist()
        raise IndexError(f"edge {bad} = {pair} indexes outside the {n} atoms")
    return energies, forces, per_atom_virials
