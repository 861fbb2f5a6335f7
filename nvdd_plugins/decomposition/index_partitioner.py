"""`IndexPartitioner`: graph-partition ownership, contiguous slices of a space-filling order.

Atoms are sorted along a Morton (Z-order) curve of their fractional coordinates in the
decomposition frame, and rank r owns the r-th of `size` contiguous, near-equal slices of that
order. Ownership is fixed once (no migration); each rank keeps the ids of its own slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvdd_plugins.decomposition.frame import DecompositionFrame

__all__ = ["IndexPartitioner", "index_owners", "morton_order"]

_BITS = 10  # per axis: 1024 bins, 30-bit codes


def _spread_bits(values: torch.Tensor) -> torch.Tensor:
    """Insert two zero bits after each of the low `_BITS` bits of `values` (int64)."""
    spread = torch.zeros_like(values)
    for bit in range(_BITS):
        spread |= ((values >> bit) & 1) << (3 * bit)
    return spread


def morton_order(positions: torch.Tensor, frame: DecompositionFrame) -> torch.Tensor:
    """Indices sorting `positions` (N, 3) along a Morton curve of their fractional
    coordinates in `frame` (wrapped on periodic axes, clamped on open ones); ties keep
    index order."""
    frac = frame.fractional(positions.detach())
    periodic = frame.pbc.to(frac.device)
    frac = torch.where(periodic, frac - torch.floor(frac), frac.clamp(0.0, 1.0))
    bins = (frac * (1 << _BITS)).long().clamp(0, (1 << _BITS) - 1)
    code = _spread_bits(bins[:, 0]) | (_spread_bits(bins[:, 1]) << 1)
    code |= _spread_bits(bins[:, 2]) << 2
    return torch.sort(code, stable=True).indices


def index_owners(
    positions: torch.Tensor, cell: torch.Tensor, pbc: torch.Tensor, size: int
) -> torch.Tensor:
    """Owning rank of each atom (CPU): contiguous slices of the Morton order, sizes differing
    by at most one atom."""
    positions = positions.detach().cpu()
    frame = DecompositionFrame.from_system(positions, cell.detach().cpu(), pbc.cpu())
    n = positions.shape[0]
    sizes = torch.tensor([n // size + (r < n % size) for r in range(size)], dtype=torch.long)
    owner = torch.empty(n, dtype=torch.long)
    owner[morton_order(positions, frame)] = torch.arange(size).repeat_interleave(sizes)
    return owner


@dataclass(frozen=True)
class IndexPartitioner:
    """The atoms one rank owns under graph partition, by global id (fixed once).

    Attributes:
        owned: (n,) ascending global ids of this rank's atoms.
        size: number of ranks.
    """

    owned: torch.Tensor
    size: int
