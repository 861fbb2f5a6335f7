"""`DecompositionFrame`: the parallelepiped that sub-domains tile, in fractional coordinates.

Periodic axes use the cell vectors. A degenerate (zero) cell vector on an open axis is
replaced by a vector spanning the atoms' extent, so clusters without a cell decompose too.
Atoms beyond an open face belong to the outermost sub-domain on that side.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvdd_plugins.geometry import (
    complete_cell,
    is_singular,
    perpendicular_widths,
    rows_times_3x3,
    zero_vectors,
)

__all__ = ["DecompositionFrame"]


@dataclass(frozen=True)
class DecompositionFrame:
    """origin (3,), box (3,3) with rows as edge vectors, pbc (3,) bool; all on one device."""

    origin: torch.Tensor
    box: torch.Tensor
    pbc: torch.Tensor

    @classmethod
    def from_system(
        cls, positions: torch.Tensor, cell: torch.Tensor, pbc: torch.Tensor
    ) -> DecompositionFrame:
        """Frame for a system: the cell, with degenerate open axes spanning the atoms."""
        cell = cell.reshape(3, 3)
        pbc = pbc.reshape(3).bool()
        degenerate = zero_vectors(cell).to(pbc.device)
        if bool((degenerate & pbc).any()):
            raise ValueError("a periodic axis has a zero cell vector")
        if not bool(degenerate.any()) and not is_singular(cell):
            return cls(torch.zeros_like(cell[0]), cell.clone(), pbc)
        box, origin = cell.clone(), torch.zeros_like(cell[0])
        # Unit vectors orthogonal to the other cell vectors (also when those are skewed).
        completed = complete_cell(torch.where(degenerate.unsqueeze(1), 0.0, cell), pbc)
        for axis in torch.nonzero(degenerate).flatten().tolist():
            direction = completed[axis] / completed[axis].norm()
            coord = positions @ direction if positions.numel() else positions.new_zeros(1)
            lo, hi = float(coord.min()), float(coord.max())
            span = max(hi - lo, 1.0)
            box[axis] = direction * span * 1.02
            origin = origin + direction * (lo - 0.01 * span)
        if is_singular(box):
            raise ValueError("cannot build a decomposition frame: the cell is singular")
        return cls(origin, box, pbc)

    def with_cell(self, cell: torch.Tensor) -> DecompositionFrame:
        """The frame after a cell change: non-degenerate cell vectors replace the box's."""
        cell = cell.reshape(3, 3).to(self.box)
        keep = zero_vectors(cell).to(cell.device).unsqueeze(1)
        return DecompositionFrame(self.origin, torch.where(keep, self.box, cell), self.pbc)

    @property
    def inverse(self) -> torch.Tensor:
        """Inverse of the box (fractional = (x - origin) @ inverse)."""
        return torch.linalg.inv(self.box)

    @property
    def widths(self) -> torch.Tensor:
        """Perpendicular widths of the box along its three axes, Å."""
        return perpendicular_widths(self.box)

    def fractional(self, positions: torch.Tensor) -> torch.Tensor:
        """Fractional coordinates of Cartesian positions in this frame."""
        return rows_times_3x3(positions - self.origin, self.inverse)

    def to(
        self, device: torch.device | str, dtype: torch.dtype | None = None
    ) -> DecompositionFrame:
        """The same frame on another device/dtype."""
        return DecompositionFrame(
            self.origin.to(device, dtype), self.box.to(device, dtype), self.pbc.to(device)
        )
