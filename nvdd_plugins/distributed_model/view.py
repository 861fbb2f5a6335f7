"""`HaloView`: one rank's compute layout (owned rows, ghost rows, padding) and its builder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch

from nvdd_plugins.comm import Communicator, HaloPlan, HaloSlot, copy_to_ghosts, fill_ghosts_
from nvdd_plugins.decomposition import SpatialPartitioner
from nvdd_plugins.geometry import build_neighbor_list, rows_times_3x3

__all__ = ["HaloView", "assemble_view", "build_halo_view"]


@dataclass(frozen=True)
class HaloView:
    """A rank's local layout between two rebuilds.

    Attributes:
        plan: the halo plan (owned rows first, then ghosts).
        n_rows: padded row count the model sees (never the edge-slot count, never 1).
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

        On the CPU computed once per view and cell: an unchanged cell without gradients gets
        the same tensor back (do not modify it). Elsewhere the comparison would cost a host
        synchronisation, more than the product."""
        reuse = cell.device.type == "cpu" and not cell.requires_grad
        known = self._shifts_by_cell
        if reuse:
            for reference, shifts in known:
                if reference.dtype == cell.dtype and torch.equal(reference, cell):
                    return shifts
        shifts = rows_times_3x3(self._unit_shift_rows.to(cell.dtype), cell)
        if reuse:
            known[:] = [(cell.clone(), shifts)]
        return shifts

    @cached_property
    def _shifts_by_cell(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [] if self.built_shifts is None else [self.built_shifts]

    def active_edges(
        self, positions: torch.Tensor, shifts: torch.Tensor, cutoff: float
    ) -> torch.Tensor:
        """The edge slots whose pairs are now closer than `cutoff`; the rest hold the sentinel."""
        edge_index = self.edge_index
        filled = edge_index[0] < self.n_rows
        safe = torch.where(filled, edge_index, torch.zeros_like(edge_index))
        x = positions.detach()
        distance = (x[safe[1]] - x[safe[0]] + shifts.detach()).norm(dim=-1)
        keep = filled & (distance < cutoff)
        return torch.where(keep, edge_index, torch.full_like(edge_index, self.n_rows))


def _receive_ghosts(
    comm: Communicator, partitioner: SpatialPartitioner, owned_positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Send each ghost image (owned row, lattice units) to its destination; return what this
    rank receives: owner ranks, owner rows and lattice units, ordered by source rank."""
    ghosts = partitioner.ghost_images(owned_positions, comm.rank)
    message = torch.cat([ghosts.rows.unsqueeze(1), ghosts.units], dim=1).cpu()
    destinations = ghosts.ranks.cpu()
    sends = {int(q): message[destinations == q] for q in torch.unique(destinations)}
    received = comm.exchange_variable(sends, template=torch.empty(0, 4, dtype=torch.long))
    sources = sorted(p for p, m in received.items() if m.shape[0])
    incoming = torch.cat([received[p] for p in sources] + [torch.empty(0, 4, dtype=torch.long)])
    owners = [torch.full((received[p].shape[0],), p, dtype=torch.long) for p in sources]
    owner_rank = torch.cat([*owners, torch.empty(0, dtype=torch.long)])
    return owner_rank, incoming[:, 0], incoming[:, 1:]


def assemble_view(
    plan: HaloPlan,
    local_positions: torch.Tensor,
    image_units: torch.Tensor,
    atomic_numbers: torch.Tensor,
    global_ids: torch.Tensor,
    pairs: torch.Tensor,
    pair_units: torch.Tensor,
    padding_species: int,
    node_capacity: Callable[[int], int],
    edge_capacity: Callable[[int], int],
    spacing: float,
    far_pair_padding: bool = False,
    wrapped_axes: torch.Tensor | None = None,
    built_shifts: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> HaloView:
    """Pad local rows (owned + ghost, given per row) and pairs to their capacities.

    Padding rows get `padding_species`, id -1 and far-apart positions (2 `spacing` Å apart,
    beyond every local atom). Empty edge slots hold the sentinel `n_rows`, or, with
    `far_pair_padding` (compiled runs: no data-dependent filtering), a pair of padding rows
    farther apart than `spacing`, which a cutoff-safe model weighs exactly zero. The row
    count is bumped until it differs from the slot count and from 1. `wrapped_axes`: the
    axes `pair_units` wrap along (default none). `built_shifts`: the pairs' Cartesian
    shifts for a cell, (cell, (E, 3)), kept (padded) for `edge_shifts`.
    """
    device = local_positions.device
    n_local = plan.n_local
    slots = edge_capacity(pairs.shape[1])
    n_rows = node_capacity(n_local + 2 if far_pair_padding else n_local)
    while n_rows in (slots, 1):
        n_rows += 1
    n_pad = n_rows - n_local

    def padded(rows: torch.Tensor, fill: int) -> torch.Tensor:
        return torch.cat([rows, rows.new_full((n_pad, *rows.shape[1:]), fill)])

    if slots == pairs.shape[1]:  # no empty slots: the pairs as they are
        edge_index, edge_units = pairs.long(), pair_units.long()
    else:
        edge_index = torch.full((2, slots), n_rows, dtype=torch.long, device=device)
        if far_pair_padding:
            edge_index[0], edge_index[1] = n_local, n_local + 1
        edge_index[:, : pairs.shape[1]] = pairs
        edge_units = torch.zeros(slots, 3, dtype=torch.long, device=device)
        edge_units[: pairs.shape[1]] = pair_units
    if built_shifts is not None:
        cell, pair_shifts = built_shifts
        if slots > pairs.shape[1]:
            pair_shifts = torch.cat([pair_shifts, pair_shifts.new_zeros(slots - pairs.shape[1], 3)])
        built_shifts = (cell.detach().clone(), pair_shifts)
    reach = local_positions.abs().max() if n_local else local_positions.new_zeros(())
    steps = torch.arange(1, n_pad + 1, device=device, dtype=local_positions.dtype)
    padding = local_positions.new_zeros(n_pad, 3)
    padding[:, 0] = reach + 10.0 * spacing + 2.0 * spacing * steps
    return HaloView(
        plan=plan,
        n_rows=n_rows,
        image_units=padded(image_units, 0),
        atomic_numbers=padded(atomic_numbers.long(), padding_species),
        global_ids=padded(global_ids.long(), -1),
        edge_index=edge_index,
        edge_unit_shifts=edge_units,
        padding_positions=padding,
        wrapped_axes=(
            torch.zeros(3, dtype=torch.bool, device=device)
            if wrapped_axes is None
            else wrapped_axes.to(device)
        ),
        built_shifts=built_shifts,
    )


def build_halo_view(
    comm: Communicator,
    partitioner: SpatialPartitioner,
    owned_positions: torch.Tensor,
    owned_numbers: torch.Tensor,
    owned_ids: torch.Tensor,
    cell: torch.Tensor,
    padding_species: int,
    node_capacity: Callable[[int], int],
    edge_capacity: Callable[[int], int],
    far_pair_padding: bool = False,
    list_pairs: bool = True,
) -> HaloView:
    """Select ghosts, build the plan and the neighbour list of this rank (collective).

    `node_capacity(n_local)` and `edge_capacity(n_edges)` give the padded sizes; see
    `assemble_view` for `far_pair_padding`. Without `list_pairs` the view has no pairs
    (an evaluation that lists its own, such as chunks of the view).
    """
    device = owned_positions.device
    n_owned = owned_positions.shape[0]
    width = partitioner.halo_width
    owner_rank, owner_row, ghost_units = _receive_ghosts(comm, partitioner, owned_positions)
    plan = HaloPlan.build(comm, n_owned, owner_rank, owner_row).to(device)

    def local_rows(owned: torch.Tensor) -> torch.Tensor:
        rows = torch.cat([owned, owned.new_zeros((plan.n_ghost, *owned.shape[1:]))])
        return fill_ghosts_(rows, plan, comm)

    _, wrap = partitioner.owned_fractional(owned_positions, comm.rank)
    units = torch.cat([-wrap, ghost_units.to(device)])
    with torch.no_grad():
        local = local_rows(owned_positions) + rows_times_3x3(units, cell)
    wrapped = partitioner.wrapped_axes.to(device)
    built_shifts = None
    if list_pairs:
        listed = build_neighbor_list(local, cell, wrapped, width, touching=n_owned)
        pairs, pair_units = listed.edge_index, listed.unit_shifts
        built_shifts = (cell, listed.shifts)
    else:
        pairs = torch.empty(2, 0, dtype=torch.long, device=device)
        pair_units = torch.empty(0, 3, dtype=torch.long, device=device)
    numbers, ids = local_rows(torch.stack([owned_numbers.long(), owned_ids.long()], 1)).unbind(1)
    return assemble_view(
        plan,
        local,
        units,
        numbers,
        ids,
        pairs,
        pair_units,
        padding_species,
        node_capacity,
        edge_capacity,
        width,
        far_pair_padding,
        wrapped,
        built_shifts,
    )
