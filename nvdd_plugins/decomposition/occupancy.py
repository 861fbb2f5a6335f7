"""Where a rank's atoms are, coarsely: the bins of a grid at least one halo width thick that
hold them, written as runs of consecutive bin keys.

Graph partition owns atoms by index, so a rank's atoms fill no box. Two atoms closer than
the width sit in the same or adjacent bins (across periodic faces too), so the ranks a rank
must hear from are those whose occupied bins touch the 27 bins around its own, and the atoms
it needs lie in those bins. A rank's runs are few (its atoms are a compact slice of a
space-filling order), so every rank can hold every rank's runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from nvdd_plugins.geometry import complete_cell, perpendicular_widths, rows_times_3x3

__all__ = ["BinGrid", "KeyRuns"]

_FIELD = 21  # bits per axis of a bin key
_OFFSET = 1 << (_FIELD - 1)  # open axes: bin 0 sits mid-field, so negative bins have keys
_LIMIT = _OFFSET - 2  # open-axis bins are clamped here: far atoms share a bin (more candidates)
_MARGIN = 1.0 + 1e-3  # bins a little thicker than the width: no rounding drops a pair
_AROUND = torch.tensor(list(itertools.product((-1, 0, 1), repeat=3)), dtype=torch.long)


@dataclass(frozen=True)
class BinGrid:
    """Bins at least `width` thick along each axis's normal, in the cell's fractional
    coordinates (CPU, float64).

    Attributes:
        inverse: (3, 3) inverse of the cell (zero vectors on open axes completed).
        scale: (3,) bins per unit of fractional coordinate.
        counts: (3,) bins along each periodic axis (wrapping); 0 on open axes (unbounded).
    """

    inverse: torch.Tensor
    scale: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def of(cls, cell: torch.Tensor, pbc: torch.Tensor, width: float) -> BinGrid:
        """The grid for `cell` (3, 3) periodic along `pbc` (3,) and pairs within `width` Å."""
        periodic = pbc.detach().cpu().reshape(3).bool()
        full = complete_cell(cell.detach().to("cpu", torch.float64), periodic)
        widths = perpendicular_widths(full)
        thickness = float(width) * _MARGIN
        counts = torch.where(periodic, (widths / thickness).floor().clamp_min(1), 0).long()
        scale = torch.where(periodic, counts.double(), widths / thickness)
        return cls(torch.linalg.inv(full), scale, counts)

    def bins(self, positions: torch.Tensor) -> torch.Tensor:
        """(N, 3) integer bin of each of `positions` (N, 3) Å."""
        frac = rows_times_3x3(positions.detach().to("cpu", torch.float64), self.inverse)
        periodic = self.counts > 0
        frac = torch.where(periodic, frac - frac.floor(), frac)
        bins = (frac * self.scale).floor()
        upper = torch.where(periodic, self.counts - 1, _LIMIT)
        lower = torch.where(periodic, 0, -_LIMIT)
        return bins.clamp(lower, upper).long()

    def around(self, bins: torch.Tensor) -> torch.Tensor:
        """(M, 27, 3) the bins around (and including) each of `bins` (M, 3), wrapped on
        periodic axes."""
        near = bins.unsqueeze(1) + _AROUND
        periodic = self.counts > 0
        return torch.where(periodic, near.remainder(self.counts.clamp_min(1)), near)

    @staticmethod
    def keys(bins: torch.Tensor) -> torch.Tensor:
        """One int64 key per bin of `bins` (..., 3), consecutive along the last axis."""
        shifted = bins + _OFFSET
        return (shifted[..., 0] << (2 * _FIELD)) | (shifted[..., 1] << _FIELD) | shifted[..., 2]


@dataclass(frozen=True)
class KeyRuns:
    """A set of bin keys as sorted half-open runs `[start, end)`.

    Attributes:
        table: (R, 2) int64, one run per row, ascending and disjoint.
    """

    table: torch.Tensor

    @classmethod
    def of(cls, keys: torch.Tensor) -> KeyRuns:
        """The runs of the distinct values of `keys` (any order, repeats allowed)."""
        keys = torch.unique(keys.long().cpu())
        if keys.numel() == 0:
            return cls(torch.empty(0, 2, dtype=torch.long))
        breaks = torch.nonzero(keys[1:] != keys[:-1] + 1).flatten() + 1
        first = torch.cat([breaks.new_zeros(1), breaks])
        last = torch.cat([breaks - 1, breaks.new_full((1,), keys.numel() - 1)])
        return cls(torch.stack([keys[first], keys[last] + 1], 1))

    def contains(self, keys: torch.Tensor) -> torch.Tensor:
        """Bool, the shape of `keys`: which keys lie in a run."""
        if self.table.shape[0] == 0:
            return torch.zeros(keys.shape, dtype=torch.bool)
        starts, ends = self._bounds()
        flat = keys.reshape(-1)
        slot = torch.searchsorted(starts, flat, right=True) - 1
        inside = (slot >= 0) & (flat < ends[slot.clamp_min(0)])
        return inside.reshape(keys.shape)

    def meets(self, keys: torch.Tensor) -> bool:
        """Whether any run holds one of the sorted distinct `keys` (1-D): O(runs log keys)."""
        if self.table.shape[0] == 0 or keys.numel() == 0:
            return False
        starts, ends = self._bounds()
        inside = torch.searchsorted(keys, ends) - torch.searchsorted(keys, starts)
        return bool((inside > 0).any())

    def _bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The runs' starts and ends, contiguous (searchsorted copies strided ones)."""
        return self.table[:, 0].contiguous(), self.table[:, 1].contiguous()
