"""Building a `HaloView`: padding rows a front end gives (`assemble_view`), or selecting
ghosts and pairs for a spatial sub-domain (`build_halo_view`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvdd_plugins.comm import Communicator, HaloPlan, fill_ghosts_
from nvdd_plugins.decomposition import SpatialPartitioner
from nvdd_plugins.distributed_model.view import HaloView
from nvdd_plugins.geometry import build_neighbor_list, rows_times_3x3

__all__ = ["assemble_view", "build_halo_view"]


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
