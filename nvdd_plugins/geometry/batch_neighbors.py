"""Neighbour lists on a `Batch`: one-shot (`attach_neighbor_list`) and Verlet lists."""

from __future__ import annotations

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.geometry.cell import images_unambiguous, rows_times_3x3
from nvdd_plugins.geometry.neighbor_list import build_neighbor_list
from nvdd_plugins.geometry.verlet import VerletState

__all__ = ["VerletNeighborList", "attach_neighbor_list", "edge_shifts"]


def edge_shifts(batch: Batch, edge_index: torch.Tensor, unit_shifts: torch.Tensor) -> torch.Tensor:
    """Cartesian shift vectors (Å) of the edges: unit shifts times their system's cell."""
    if batch.num_graphs == 1:
        return rows_times_3x3(unit_shifts, batch.cell[0])
    return rows_times_3x3(unit_shifts, batch.cell[batch.batch_idx[edge_index[0]]])


def attach_neighbor_list(batch: Batch, cutoff: float) -> None:
    """Build each system's full neighbour list at `cutoff` (Å) and store it on the batch."""
    edges, unit_shifts = [], []
    for g in range(batch.num_graphs):
        lo, hi = int(batch.ptr[g]), int(batch.ptr[g + 1])
        nl = build_neighbor_list(
            batch.positions[lo:hi].detach(), batch.cell[g].detach(), batch.pbc[g], cutoff
        )
        edges.append(nl.edge_index + lo)
        unit_shifts.append(nl.unit_shifts)
    edge_index, units = torch.cat(edges, 1), torch.cat(unit_shifts)
    batch.set_edges(edge_index, shifts=edge_shifts(batch, edge_index, units), unit_shifts=units)


class VerletNeighborList:
    """A neighbour list built at cutoff + skin and reused until an atom moved more than
    skin / 2 or the cell or species changed; `attach` stores the pairs within `cutoff`
    (or all listed pairs with `filter_pairs=False`, for models that zero them exactly, when
    every periodic width exceeds 2 × (cutoff + skin): see `images_unambiguous`)."""

    def __init__(self, cutoff: float, skin: float = 0.0, filter_pairs: bool = True) -> None:
        self.cutoff = float(cutoff)
        self.skin = float(skin)
        self.filter_pairs = filter_pairs
        self._verlet = VerletState(skin)
        self._pairs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._keep_all = False

    def attach(self, batch: Batch) -> None:
        """Set `edge_index`, `shifts` and `unit_shifts` of `batch` to its current pairs."""
        positions = batch.positions.detach()
        if self._pairs is None or self._verlet.stale(
            positions, batch.cell, numbers=batch.atomic_numbers
        ):
            listed = batch.copy()
            attach_neighbor_list(listed, self.cutoff + self.skin)
            units = listed.unit_shifts
            self._pairs = (listed.edge_index, units, units.to(positions.dtype))
            self._verlet.record(positions, batch.cell, numbers=batch.atomic_numbers)
            reach = self.cutoff + self.skin
            self._keep_all = not self.filter_pairs and all(
                images_unambiguous(batch.cell[g], batch.pbc[g], reach)
                for g in range(batch.num_graphs)
            )
        edge_index, unit_shifts, unit_rows = self._pairs
        shifts = edge_shifts(batch, edge_index, unit_rows)
        if self.skin == 0.0 or self._keep_all:
            batch.set_edges(edge_index, shifts=shifts, unit_shifts=unit_shifts)
            return
        vectors = positions[edge_index[1]] - positions[edge_index[0]] + shifts
        keep = vectors.norm(dim=-1) < self.cutoff
        batch.set_edges(edge_index[:, keep], shifts=shifts[keep], unit_shifts=unit_shifts[keep])
