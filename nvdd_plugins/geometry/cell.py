"""Periodic cells: volume, perpendicular widths, fractional coordinates, wrapping, minimum image.

Conventions are ASE's: ``cell`` is a (3, 3) tensor whose *rows* are the lattice vectors (Å),
positions are (N, 3) Cartesian coordinates (Å), fractional coordinates are
``positions @ inverse(cell)``, and ``pbc`` is a (3,) bool tensor or a sequence of three bools
(a single bool means the same for all three axes). Every function keeps the dtype and device
of its tensor inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

__all__ = [
    "complete_cell",
    "images_unambiguous",
    "is_singular",
    "minimum_image",
    "perpendicular_widths",
    "rows_times_3x3",
    "to_cartesian",
    "to_fractional",
    "volume",
    "wrap_positions",
    "zero_vectors",
]

PbcLike = bool | Sequence[bool] | torch.Tensor

_SINGULAR_RTOL = 1e-10


def _as_pbc(pbc: PbcLike) -> tuple[bool, bool, bool]:
    """Normalise ``pbc`` to a tuple of three Python bools (a host sync for a GPU tensor)."""
    if isinstance(pbc, torch.Tensor):
        if pbc.dim() == 0:
            flag = bool(pbc.item())
            return (flag, flag, flag)
        values = pbc.detach().cpu().reshape(-1).tolist()
    elif isinstance(pbc, bool):
        return (pbc, pbc, pbc)
    else:
        values = list(pbc)
    if len(values) != 3:
        raise ValueError(f"pbc must have 3 entries, got {len(values)}")
    return (bool(values[0]), bool(values[1]), bool(values[2]))


def _check_cell(cell: torch.Tensor) -> None:
    if not isinstance(cell, torch.Tensor):
        raise TypeError(f"cell must be a torch.Tensor, got {type(cell).__name__}")
    if cell.shape != (3, 3):
        raise ValueError(
            f"cell must have shape (3, 3) (rows are lattice vectors), got {tuple(cell.shape)}"
        )
    if not cell.is_floating_point():
        raise TypeError(f"cell must be a floating-point tensor, got {cell.dtype}")


def _check_vectors(name: str, vectors: torch.Tensor) -> None:
    if not isinstance(vectors, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(vectors).__name__}")
    if vectors.dim() == 0 or vectors.shape[-1] != 3:
        raise ValueError(f"{name} must have shape (..., 3), got {tuple(vectors.shape)}")
    if not vectors.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {vectors.dtype}")


def zero_vectors(cell: torch.Tensor) -> torch.Tensor:
    """(3,) bool on `cell`'s device: which lattice vectors are zero (negligible against the
    longest one), as ASE gives them along open axes."""
    norms = torch.linalg.vector_norm(cell.detach(), dim=1)
    return ~(norms > 1e-12 * norms.max().clamp_min(1e-300))


def is_singular(cell: torch.Tensor) -> bool:
    """True when ``|det(cell)|`` is negligible against the product of the row lengths."""
    host = cell.detach().to("cpu", torch.float64)
    det = abs(float(torch.linalg.det(host)))
    scale = float(torch.linalg.vector_norm(host, dim=1).prod())
    return not det > _SINGULAR_RTOL * scale


def _inverse(cell: torch.Tensor) -> torch.Tensor:
    if is_singular(cell):
        raise ValueError("cell is singular (zero volume); fractional coordinates are undefined")
    return torch.linalg.inv(cell)


def volume(cell: torch.Tensor) -> torch.Tensor:
    """Volume of the cell, ``|det(cell)|`` in Å³, as a 0-d tensor."""
    _check_cell(cell)
    return torch.linalg.det(cell).abs()


def perpendicular_widths(cell: torch.Tensor) -> torch.Tensor:
    """Distances (Å) between the opposite faces of the cell, shape (3,).

    Entry ``k`` is the thickness of the cell along the normal of the face spanned by the other
    two lattice vectors, ``volume / |a_{k+1} x a_{k+2}|``; a sphere of radius ``r`` fits in the
    cell only if ``2 r`` is at most the smallest width. Widths of a singular cell are zero.
    """
    _check_cell(cell)
    crosses = torch.linalg.cross(cell.roll(-1, dims=0), cell.roll(-2, dims=0), dim=-1)
    areas = torch.linalg.vector_norm(crosses, dim=-1)
    tiny = torch.finfo(cell.dtype).tiny
    return volume(cell) / areas.clamp_min(tiny)


def images_unambiguous(cell: torch.Tensor, pbc: PbcLike, reach: float) -> bool:
    """Whether every periodic perpendicular width exceeds 2 × `reach` (Å), so that a pair
    vector shorter than `reach` is its own minimum image. A Verlet list at cutoff + skin may
    be handed unfiltered to a model that takes minimum images only when this holds for
    reach = cutoff + skin: otherwise a skin pair can fold onto another image of its pair."""
    periodic = _as_pbc(pbc)
    if not any(periodic):
        return True
    host = cell.detach().cpu()
    return _widths_exceed(tuple(host.flatten().tolist()), host.dtype, periodic, float(reach))


@functools.lru_cache(maxsize=64)
def _widths_exceed(
    values: tuple[float, ...], dtype: torch.dtype, periodic: tuple[bool, bool, bool], reach: float
) -> bool:
    """`images_unambiguous` of the cell of `values` (row-major) in `dtype`; remembered, as a
    rebuild asks it again of an unchanged cell (some twenty small tensor operations)."""
    cell = torch.tensor(values, dtype=dtype).view(3, 3)
    mask = torch.tensor(periodic)
    widths = perpendicular_widths(complete_cell(cell, periodic))
    return bool((widths[mask] > 2.0 * reach).all())


def complete_cell(cell: torch.Tensor, pbc: PbcLike) -> torch.Tensor:
    """Replace zero lattice vectors on non-periodic axes by unit vectors orthogonal to the rest.

    For a slab or wire given with a zero vector along its open axes (common in ASE), this
    returns an invertible cell that agrees with ``cell`` on the periodic axes, so fractional
    coordinates and wrapping are defined. Raises ``ValueError`` when a periodic axis has a
    zero vector or the completed cell is singular.
    """
    _check_cell(cell)
    periodic = _as_pbc(pbc)
    host = cell.detach().to("cpu", torch.float64).clone()
    norms = torch.linalg.vector_norm(host, dim=1)
    missing = torch.nonzero(zero_vectors(host)).flatten().tolist()
    for k in missing:
        if periodic[k]:
            raise ValueError(f"periodic axis {k} has a zero lattice vector")
    if missing:
        present = [k for k in range(3) if k not in missing]
        if not present:
            host = torch.eye(3, dtype=torch.float64)
        elif len(present) == 1:
            a = host[present[0]] / norms[present[0]]
            trial = torch.zeros(3, dtype=torch.float64)
            trial[int(a.abs().argmin())] = 1.0
            b = trial - (trial @ a) * a
            b = b / torch.linalg.vector_norm(b)
            c = torch.linalg.cross(a, b, dim=-1)
            host[missing[0]], host[missing[1]] = b, c
        else:
            c = torch.linalg.cross(host[present[0]], host[present[1]], dim=-1)
            c_norm = float(torch.linalg.vector_norm(c))
            if not c_norm > 0.0:
                raise ValueError("cell is singular: the periodic lattice vectors are parallel")
            host[missing[0]] = c / c_norm
    if is_singular(host):
        where = " but has a periodic axis" if any(periodic) else ""
        raise ValueError(f"cell is singular (zero volume){where}")
    if not missing:
        return cell
    return host.to(dtype=cell.dtype, device=cell.device)


def rows_times_3x3(rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """``rows @ matrix`` for rows of three, ``rows`` (..., 3) and ``matrix`` (..., 3, 3) with
    broadcasting batch dimensions, in the full precision of the dtype on every device.

    Written as three scaled matrix rows instead of a matrix product because CUDA matrix
    products in float32 may run in TF32 (``torch.set_float32_matmul_precision("high")``),
    whose 10-bit mantissa moves a lattice shift of a 100 Å cell by ~0.1 Å: enough to drop or
    invent neighbours. Elementwise products also give the same bits on the CPU and the GPU.
    Integer rows (lattice shifts) are promoted to the matrix's dtype; differentiable.
    """
    if not rows.is_floating_point():
        rows = rows.to(matrix.dtype)  # one conversion, not three mixed-type products
    first = rows[..., 0, None] * matrix[..., 0, :]
    return first + rows[..., 1, None] * matrix[..., 1, :] + rows[..., 2, None] * matrix[..., 2, :]


def to_fractional(positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
    """Fractional coordinates ``positions @ inverse(cell)`` of Cartesian positions (Å), shape kept.

    Raises ``ValueError`` for a singular cell.
    """
    _check_vectors("positions", positions)
    _check_cell(cell)
    return rows_times_3x3(positions, _inverse(cell))


def to_cartesian(frac: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
    """Cartesian coordinates (Å) ``frac @ cell`` of fractional coordinates, shape kept."""
    _check_vectors("frac", frac)
    _check_cell(cell)
    return rows_times_3x3(frac, cell)


def wrap_positions(
    positions: torch.Tensor, cell: torch.Tensor | None, pbc: PbcLike
) -> tuple[torch.Tensor, torch.Tensor]:
    """Wrap positions (Å) into the cell along the periodic axes.

    Returns ``(wrapped, image)``: ``image`` is an int64 tensor of the same shape with zeros on
    the non-periodic axes, and ``positions == wrapped + image @ cell`` (up to rounding); the
    fractional coordinates of ``wrapped`` lie in ``[0, 1)`` on the periodic axes (up to
    rounding). Zero lattice vectors on non-periodic axes are allowed (see ``complete_cell``);
    with no periodic axis ``cell`` may be ``None`` and the positions come back unchanged.
    """
    _check_vectors("positions", positions)
    periodic = _as_pbc(pbc)
    image = torch.zeros(positions.shape, dtype=torch.int64, device=positions.device)
    if not any(periodic):
        return positions.clone(), image
    if cell is None:
        raise ValueError("a cell is required when an axis is periodic")
    _, image, wrapped = wrap_in_complete_cell(positions, complete_cell(cell, periodic), periodic)
    return wrapped, image


def wrap_in_complete_cell(
    positions: torch.Tensor, full: torch.Tensor, periodic: tuple[bool, bool, bool]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``wrap_positions`` for an invertible cell (``complete_cell``'s output), returning the
    wrapped fractional coordinates too: ``(frac, image, wrapped)``."""
    frac = rows_times_3x3(positions, torch.linalg.inv(full))
    mask = torch.tensor(periodic, device=positions.device)
    image = torch.where(mask, torch.floor(frac), torch.zeros_like(frac)).to(torch.int64)
    return frac - image.to(frac.dtype), image, positions - rows_times_3x3(image, full)


def minimum_image(vectors: torch.Tensor, cell: torch.Tensor | None, pbc: PbcLike) -> torch.Tensor:
    """Periodic image of difference vectors (Å) with fractional components in ``[-1/2, 1/2]``.

    Rounds the fractional components on the periodic axes to the nearest integer and removes
    that many lattice vectors. The result is the *shortest* image whenever the shortest image
    is shorter than half the smallest perpendicular width of the cell (always true for the
    pair distances of interest when ``cutoff < min(width) / 2``); for longer vectors in a
    triclinic cell it is an image, but not necessarily the shortest one. Shape is kept.
    """
    _check_vectors("vectors", vectors)
    periodic = _as_pbc(pbc)
    if not any(periodic):
        return vectors.clone()
    if cell is None:
        raise ValueError("a cell is required when an axis is periodic")
    full = complete_cell(cell, periodic)
    frac = rows_times_3x3(vectors, torch.linalg.inv(full))
    mask = torch.tensor(periodic, device=vectors.device)
    shift = torch.where(mask, torch.round(frac), torch.zeros_like(frac))
    return vectors - rows_times_3x3(shift, full)
