"""`VerletState`: what a neighbour list was built for, when it goes stale, and the padded
sizes it was built with."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .cell import PbcLike, _as_pbc

__all__ = ["Capacity", "VerletState"]


@dataclass
class Capacity:
    """A padded size that only grows: by `growth` with some slack when exceeded, or exactly
    the size needed when `growth` is None.

    Exact sizes keep eager runs as cheap as possible; growing ones keep the shapes of a
    compiled forward fixed across rebuilds.
    """

    growth: float | None = None
    value: int = 0

    def fit(self, need: int) -> int:
        """The padded size for `need` rows or slots."""
        if self.growth is None:
            self.value = need
        elif need > self.value:
            self.value = max(need, math.ceil(need * self.growth), 8)
        return self.value


def _same(reference: Any, current: Any) -> bool:
    if not isinstance(reference, torch.Tensor) or not isinstance(current, torch.Tensor):
        return reference is None and current is None
    if reference.shape != current.shape:
        return False
    return torch.equal(reference, current.detach().to(reference.device, reference.dtype))


class VerletState:
    """The state a Verlet list keeps between rebuilds.

    A list built with radius ``cutoff + skin`` stays valid for ``cutoff`` while no atom has
    moved more than ``skin / 2`` (Å) since the build (``threshold``: less when atoms may also
    stay on a rank past its border). The state holds

    * the reference of the last ``record``: positions, cell, pbc, atomic numbers and ``ids``
      (any row layout the list depends on, e.g. a front end's global ids), and
    * ``rows`` and ``pairs``: the padded row and pair-slot capacities of the list.

    ``stale`` is the one answer to whether a list still holds: True when there is no
    reference, the atom count, cell, pbc, numbers or ids differ, or an atom moved more than
    the threshold (any move with no skin). Without positions only the layout is compared:
    for lists whose pairs a front end provides. Displacements are raw Cartesian differences,
    so re-wrapping atoms into the cell also triggers a rebuild. Capacities are fitted on the
    host at each build, so a list never overflows them.

    Args:
        skin: Verlet skin, Å.
        threshold: largest displacement that needs no rebuild; default ``skin / 2``.
        growth: capacity growth factor; None keeps capacities exact.
    """

    def __init__(
        self, skin: float = 0.0, threshold: float | None = None, growth: float | None = None
    ) -> None:
        skin = float(skin)
        if not skin >= 0.0:
            raise ValueError(f"skin must be non-negative, got {skin}")
        self._skin = skin
        self._threshold = 0.5 * skin if threshold is None else float(threshold)
        self.rows = Capacity(growth)
        self.pairs = Capacity(growth)
        self._positions: torch.Tensor | None = None
        self._layout: tuple[Any, ...] | None = None
        self._row_layout = False  # pbc, numbers or ids recorded: compared on the host

    @property
    def reference(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """Positions and cell of the last ``record``, or None."""
        if self._layout is None or self._positions is None:
            return None
        return self._positions, self._layout[0]

    def reset(self) -> None:
        """Forget the reference, so the next ``stale`` answers True."""
        self._positions = self._layout = None

    def record(
        self,
        positions: torch.Tensor | None,
        cell: torch.Tensor | None = None,
        pbc: PbcLike | None = None,
        numbers: torch.Tensor | None = None,
        ids: torch.Tensor | None = None,
    ) -> None:
        """Record the configuration (positions in Å, cell rows in Å) a list was built for."""
        if positions is not None and (positions.dim() != 2 or positions.shape[-1] != 3):
            raise ValueError(f"positions must have shape (N, 3), got {tuple(positions.shape)}")
        self._positions = None if positions is None else positions.detach().clone()
        self._layout = (
            *(None if t is None else torch.as_tensor(t).detach().clone() for t in (cell, numbers)),
            None if pbc is None else _as_pbc(pbc),
            None if ids is None else torch.as_tensor(ids).detach().clone(),
        )
        self._row_layout = any(part is not None for part in self._layout[1:])

    def stale(
        self,
        positions: torch.Tensor | None,
        cell: torch.Tensor | None = None,
        pbc: PbcLike | None = None,
        numbers: torch.Tensor | None = None,
        ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """0-d bool: a list recorded at the last ``record`` may miss a pair within the
        cutoff. Positions and cell are compared on their device, without a host
        synchronisation (no reference with as many atoms, an atom moved more than the
        threshold, `cell` differs from the reference); the layout (pbc, numbers, ids) on
        the host (all compared exactly, ``None`` is a value), which synchronises only where
        a tensor is given or recorded. Without positions only the layout is compared (on
        the host: the answer is a CPU tensor)."""
        device = torch.device("cpu") if positions is None else positions.device
        if self._layout is None:
            return torch.ones((), dtype=torch.bool, device=device)
        given = pbc is not None or numbers is not None or ids is not None
        if (given or self._row_layout) and not self._same_layout(pbc, numbers, ids):
            return torch.ones((), dtype=torch.bool, device=device)
        if positions is None:
            return torch.zeros((), dtype=torch.bool, device=device)
        reference = self._positions
        if reference is None or positions.shape != reference.shape:
            return torch.ones((), dtype=torch.bool, device=positions.device)
        reference = reference.to(positions.device, positions.dtype)
        moved = (positions.detach() - reference).square().sum(dim=1)
        far = (moved > self._threshold**2).any()
        cell_then = self._layout[0]
        if cell is None and cell_then is None:
            return far
        if cell is None or cell_then is None or cell.shape != cell_then.shape:
            return torch.ones((), dtype=torch.bool, device=positions.device)
        return far | (cell.detach() != cell_then.to(cell.device, cell.dtype)).any()

    def _same_layout(
        self, pbc: PbcLike | None, numbers: torch.Tensor | None, ids: torch.Tensor | None
    ) -> bool:
        assert self._layout is not None
        _, numbers_then, pbc_then, ids_then = self._layout
        same_pbc = (None if pbc is None else _as_pbc(pbc)) == pbc_then
        return same_pbc and _same(numbers_then, numbers) and _same(ids_then, ids)
