"""`HaloView`: one rank's compute layout (owned rows, ghost rows, padding)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import torch

from nvdd_plugins.comm import Communicator, HaloPlan, HaloSlot, copy_to_ghosts
from nvdd_plugins.geometry import rows_times_3x3

__all__ = ["HaloView", "far_pairs"]


def far_pairs(first: int, count: int, slots: range, device: torch.device) -> torch.Tensor:
    """(2, len(slots)) pairs of padding rows `first` .. `first + count - 1` (count >= 2) for
    the edge slots `slots`: slot k joins rows first + k mod count and first + (k + 1) mod
    count, which sit farther apart than any cutoff. Spread over every padding row so that no
    one row receives all the empty slots: a kernel that reduces over each receiver's edges
    (cuEquivariance's) slows down on such a row."""
    k = torch.arange(slots.start, slots.stop, device=device)
    return torch.stack([first + k % count, first + (k + 1) % count])


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: it holds tensors
class HaloView:
    """A rank's local layout between two rebuilds.

    Attributes:
        plan: the halo plan (owned rows first, then ghosts).
        n_rows: padded row count the model sees (never the edge-slot count; never 1 but in
            a graph-partition view, which has no padding rows: see `view_build.Padding`).
        image_units: (n_rows, 3) lattice translation, in cell vectors, from each row's
            owner-stored position to its position in this view (owned rows are wrapped into
            the cell; ghosts sit at their periodic image; padding 0).
        atomic_numbers, global_ids: (n_rows,) per row (padding: a valid species, id -1).
        edge_index: (2, n_edge_slots) pairs within cutoff + skin at build time that touch an
            owned row; empty slots hold the sentinel `n_rows`.
        edge_unit_shifts: (n_edge_slots, 3) lattice shifts of the pairs along wrapped axes
            (`SpatialPartitioner.wrapped_axes`); zero elsewhere.
        padding_positions: (n_rows - n_local, 3) far-away positions of the padding rows.
        wrapped_axes: (3,) bool, the periodic axes along which pairs wrap (edge shifts)
            instead of reaching ghost images.
        built_shifts: optional (cell, shifts): the edge slots' Cartesian shifts (Å) for that
            (3, 3) cell, as `edge_shifts` computes them; given back for the same cell.
    """

    plan: HaloPlan
    n_rows: int
    image_units: torch.Tensor
    atomic_numbers: torch.Tensor
    global_ids: torch.Tensor
    edge_index: torch.Tensor
    edge_unit_shifts: torch.Tensor
    padding_positions: torch.Tensor
    wrapped_axes: torch.Tensor
    built_shifts: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def n_owned(self) -> int:
        """Owned rows."""
        return self.plan.n_owned

    @property
    def n_local(self) -> int:
        """Owned + ghost rows."""
        return self.plan.n_local

    @cached_property
    def owned_mask(self) -> torch.Tensor:
        """(n_rows,) True on owned rows."""
        mask = torch.zeros(self.n_rows, dtype=torch.bool, device=self.edge_index.device)
        mask[: self.n_owned] = True
        return mask

    @cached_property
    def row_ptr(self) -> torch.Tensor:
        """`Batch.ptr` of the view (one system of n_rows atoms)."""
        return torch.tensor([0, self.n_rows], device=self.edge_index.device)

    @cached_property
    def row_batch(self) -> torch.Tensor:
        """`Batch.batch_idx` of the view (all zeros)."""
        return torch.zeros(self.n_rows, dtype=torch.long, device=self.edge_index.device)

    def positions(
        self, owned_positions: torch.Tensor, cell: torch.Tensor, comm: Communicator
    ) -> torch.Tensor:
        """Every row's position from the owned ones: ghosts through `copy_to_ghosts` (so
        gradients reaching ghosts flow back to their owners), plus lattice translations."""
        rows = owned_positions
        if self.plan.exchanges:
            rows = torch.cat([rows, rows.new_zeros(self.plan.n_ghost, 3)])
            rows = copy_to_ghosts(rows, self.slot(comm))
        if self._has_images:
            rows = rows + rows_times_3x3(self._image_rows.to(cell.dtype), cell)
        if self.n_rows == self.n_local:
            return rows
        return torch.cat([rows, self.padding_positions.to(rows.dtype)])

    def slot(self, comm: Communicator) -> int:
        """The number through which the halo ops reach this view's plan exchanged over `comm`."""
        return self._slot.bind(self.plan, comm)

    @cached_property
    def _slot(self) -> HaloSlot:
        return HaloSlot()

    @cached_property
    def _has_images(self) -> bool:
        # once per view: a host synchronisation, which each step's translation would not need
        return bool(self.image_units[: self.n_local].any())

    @cached_property
    def _image_rows(self) -> torch.Tensor:
        return self.image_units[: self.n_local].to(self.padding_positions.dtype)

    @cached_property
    def _unit_shift_rows(self) -> torch.Tensor:
        # Converted once per view instead of once per step.
        return self.edge_unit_shifts.to(self.padding_positions.dtype)

    def edge_shifts(self, cell: torch.Tensor) -> torch.Tensor:
        """Cartesian shift (Å) of every edge slot for the (possibly strained) cell (3, 3).

        Computed once per view and cell: a cell without gradients that is unchanged (the
        tensor given last time, not modified since; on the CPU also an equal one) gets the
        same tensor back (do not modify it). On a GPU comparing values would cost a host
        synchronisation, more than the product."""
        if cell.requires_grad:
            return rows_times_3x3(self._unit_shift_rows.to(cell.dtype), cell)
        for known in self._shifts_by_cell:
            if known.matches(cell):
                return known.shifts
        shifts = rows_times_3x3(self._unit_shift_rows.to(cell.dtype), cell)
        self._shifts_by_cell[:] = [_CellShifts.of(cell, shifts)]
        return shifts

    @cached_property
    def _shifts_by_cell(self) -> list[_CellShifts]:
        if self.built_shifts is None:
            return []
        cell, shifts = self.built_shifts
        return [_CellShifts(None, 0, cell, shifts)]

    def active_edges(
        self, positions: torch.Tensor, shifts: torch.Tensor, cutoff: float
    ) -> torch.Tensor:
        """The edge slots whose pairs are now closer than `cutoff`; the rest hold the sentinel."""
        return torch.where(self._within(positions, shifts, cutoff), self.edge_index, self.n_rows)

    def within_cutoff(
        self, positions: torch.Tensor, shifts: torch.Tensor, cutoff: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`edge_index`, `shifts` and `edge_unit_shifts` at fixed shapes: the slots whose
        pairs are now closer than `cutoff` as they are, the others holding the view's far
        pairs of padding rows (`Padding.far_pairs`, `far_pairs`) at zero shift, which a
        model that weighs pairs beyond its cutoff not zero counts on those rows only (no
        atom's)."""
        within = self._within(positions, shifts, cutoff)
        slots = range(self.edge_index.shape[1])
        far = far_pairs(self.n_local, self.n_rows - self.n_local, slots, self.edge_index.device)
        return (
            torch.where(within, self.edge_index, far),
            torch.where(within.unsqueeze(1), shifts, 0.0),
            torch.where(within.unsqueeze(1), self.edge_unit_shifts, 0),
        )

    def _within(self, positions: torch.Tensor, shifts: torch.Tensor, cutoff: float) -> torch.Tensor:
        """(n_edge_slots,) bool: the filled slots whose pairs are closer than `cutoff` now."""
        edge_index = self.edge_index
        filled = edge_index[0] < self.n_rows
        safe = torch.where(filled, edge_index, torch.zeros_like(edge_index))
        x = positions.detach()
        distance = (x[safe[1]] - x[safe[0]] + shifts.detach()).norm(dim=-1)
        return filled & (distance < cutoff)


class _CellShifts(NamedTuple):
    """Edge shifts computed for a cell: the tensor given (held, so no other tensor takes
    its memory) and its version counter then, a copy of its values, and the shifts."""

    source: torch.Tensor | None
    version: int
    values: torch.Tensor
    shifts: torch.Tensor

    @classmethod
    def of(cls, cell: torch.Tensor, shifts: torch.Tensor) -> _CellShifts:
        tracked = not cell.is_inference()
        return cls(cell if tracked else None, cell._version if tracked else 0, cell.clone(), shifts)

    def matches(self, cell: torch.Tensor) -> bool:
        """Whether `cell` is unchanged: the same memory not written since, or (on the CPU,
        where comparing costs no synchronisation) equal values."""
        if cell.dtype != self.values.dtype or cell.device != self.values.device:
            return False
        source = self.source
        if (
            source is not None
            and not cell.is_inference()
            and cell._version == self.version
            and cell.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
            and (cell.shape, cell.stride(), cell.storage_offset())
            == (source.shape, source.stride(), source.storage_offset())
        ):
            return True
        return cell.device.type == "cpu" and torch.equal(self.values, cell)
