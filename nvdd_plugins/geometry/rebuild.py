"""Verlet-list rebuild detection: rebuild when atoms moved more than half the skin."""

from __future__ import annotations

import torch

from .cell import PbcLike, _as_pbc

__all__ = ["RebuildDetector"]


def _same(reference: torch.Tensor | None, current: torch.Tensor | None) -> bool:
    if reference is None or current is None:
        return reference is None and current is None
    current = torch.as_tensor(current)
    if reference.shape != current.shape:
        return False
    return torch.equal(reference, current.detach().to(reference.device, reference.dtype))


class RebuildDetector:
    """Remembers the configuration of the last neighbour-list build and says when to rebuild.

    A list built with radius ``cutoff + skin`` stays valid for ``cutoff`` as long as no atom
    has moved more than ``skin / 2`` (Å) since the build. ``needs_rebuild`` is True when there
    is no reference yet, ``skin`` is 0, the number of atoms changed, the maximum displacement
    exceeds ``skin / 2``, or the cell, pbc or atomic numbers differ from the values passed to
    the last ``update`` (compared exactly; ``None`` is a value). Displacements are raw Cartesian
    differences, so re-wrapping atoms into the cell also triggers a rebuild.
    """

    def __init__(self, skin: float, threshold: float | None = None) -> None:
        skin = float(skin)
        if not skin >= 0.0:
            raise ValueError(f"skin must be non-negative, got {skin}")
        self._skin = skin
        # the largest displacement that needs no rebuild (less than skin / 2 when atoms may
        # also stay on a rank past its border: migration hysteresis)
        self._threshold = 0.5 * skin if threshold is None else float(threshold)
        self._positions: torch.Tensor | None = None
        self._cell: torch.Tensor | None = None
        self._pbc: tuple[bool, bool, bool] | None = None
        self._numbers: torch.Tensor | None = None

    @property
    def skin(self) -> float:
        """Verlet skin (Å)."""
        return self._skin

    @property
    def reference(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """Positions and cell of the last ``update``, or None."""
        return None if self._positions is None else (self._positions, self._cell)

    @property
    def has_reference(self) -> bool:
        """Whether ``update`` has been called since construction or the last ``reset``."""
        return self._positions is not None

    def reset(self) -> None:
        """Forget the reference, so the next ``needs_rebuild`` answers True."""
        self._positions = self._cell = self._pbc = self._numbers = None

    def update(
        self,
        positions: torch.Tensor,
        cell: torch.Tensor | None = None,
        pbc: PbcLike | None = None,
        numbers: torch.Tensor | None = None,
    ) -> None:
        """Record the configuration (positions in Å, cell rows in Å) used for a build."""
        if positions.dim() != 2 or positions.shape[-1] != 3:
            raise ValueError(f"positions must have shape (N, 3), got {tuple(positions.shape)}")
        self._positions = positions.detach().clone()
        self._cell = None if cell is None else torch.as_tensor(cell).detach().clone()
        self._pbc = None if pbc is None else _as_pbc(pbc)
        self._numbers = None if numbers is None else torch.as_tensor(numbers).detach().clone()

    def max_displacement(self, positions: torch.Tensor) -> torch.Tensor:
        """Largest distance (Å) any atom moved since the last ``update``, as a 0-d tensor."""
        if self._positions is None:
            raise RuntimeError("no reference configuration; call update() first")
        if positions.shape != self._positions.shape:
            raise ValueError(
                f"positions have shape {tuple(positions.shape)}, the reference "
                f"{tuple(self._positions.shape)}"
            )
        reference = self._positions.to(positions.device, positions.dtype)
        if positions.shape[0] == 0:
            return positions.new_zeros(())
        return torch.linalg.vector_norm(positions.detach() - reference, dim=1).max()

    def exceeded(self, positions: torch.Tensor, cell: torch.Tensor | None = None) -> torch.Tensor:
        """0-d bool on the positions' device, without a host synchronisation: an atom moved
        more than the threshold, or `cell` differs from the reference (same atom count as the
        reference required). For callers that combine it with other flags first."""
        if self._positions is None or positions.shape != self._positions.shape:
            raise ValueError("exceeded() needs a reference with as many atoms; see has_reference")
        reference = self._positions.to(positions.device, positions.dtype)
        moved = (positions.detach() - reference).square().sum(dim=1)
        far = (moved > self._threshold**2).any()
        if cell is not None and self._cell is not None:
            far = far | (cell.detach() != self._cell.to(cell.device, cell.dtype)).any()
        return far

    def needs_rebuild(
        self,
        positions: torch.Tensor,
        cell: torch.Tensor | None = None,
        pbc: PbcLike | None = None,
        numbers: torch.Tensor | None = None,
    ) -> bool:
        """True when a list built at the last ``update`` may miss a pair within the cutoff."""
        if self._positions is None or self._skin == 0.0:
            return True
        if positions.shape != self._positions.shape:
            return True
        if not _same(self._cell, cell) or not _same(self._numbers, numbers):
            return True
        if (None if pbc is None else _as_pbc(pbc)) != self._pbc:
            return True
        return bool(self.exceeded(positions))
