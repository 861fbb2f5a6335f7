"""Building a `HaloView`, in one place with one padding rule: `padded_view` pads the local
rows and pairs any layout gives (`ViewRows`); `build_halo_view` selects them for a spatial
sub-domain first, `chunk_view` for a chunk of a thick shell's rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from nvdd_plugins.comm import Communicator, HaloPlan, fill_ghosts_
from nvdd_plugins.data import Batch
from nvdd_plugins.decomposition import SpatialPartitioner
from nvdd_plugins.distributed_model.rows.view import HaloView, far_pairs
from nvdd_plugins.geometry import build_neighbor_list, rows_times_3x3

__all__ = [
    "Padding",
    "PairListing",
    "ViewRows",
    "build_halo_view",
    "chunk_view",
    "padded_pairs",
    "padded_rows",
    "padded_view",
    "slot_count",
]


def _exact(count: int) -> int:
    return count


@dataclass(frozen=True)
class ViewRows:
    """One rank's local rows (owned first, then ghosts) and the pairs among them.

    Attributes:
        plan: the halo plan of the rows.
        positions: (n_local, 3) where the rows sit (padding goes beyond them).
        atomic_numbers, global_ids: (n_local,) per row.
        pairs: (2, E) local row indices (the view may share the pair tensors: hand over
            ones nobody writes afterwards).
        image_units: (n_local, 3) lattice units from owner-stored to view position (None: 0).
        pair_units: (E, 3) lattice shifts of the pairs along `wrapped_axes` (None: 0).
        wrapped_axes: (3,) bool, the axes pairs wrap along (None: none).
        built_shifts: optional (cell, (E, 3)): the pairs' Cartesian shifts for that cell.
    """

    plan: HaloPlan
    positions: torch.Tensor
    atomic_numbers: torch.Tensor
    global_ids: torch.Tensor
    pairs: torch.Tensor
    image_units: torch.Tensor | None = None
    pair_units: torch.Tensor | None = None
    wrapped_axes: torch.Tensor | None = None
    built_shifts: tuple[torch.Tensor, torch.Tensor] | None = None


@dataclass(frozen=True)
class Padding:
    """How a view is padded.

    Attributes:
        species: atomic number of padding rows (one the model knows).
        spacing: Å; padding rows sit 2 `spacing` apart, beyond every local row.
        node_capacity, edge_capacity: padded row count for n_local rows and slot count for
            E pairs (default: exact).
        far_pairs: empty edge slots hold pairs of padding rows farther apart than
            `spacing` (`view.far_pairs`; compiled runs: no data-dependent filtering)
            instead of the sentinel.
        extra_rows: padding rows may be added to keep the row count off the slot count and
            off 1; without (graph partition: a model that builds its own graph by minimum
            image must find no row that is not an atom) a sentinel slot is added instead,
            and only a rank owning nothing gets rows, two.
    """

    species: int
    spacing: float
    node_capacity: Callable[[int], int] = _exact
    edge_capacity: Callable[[int], int] = _exact
    far_pairs: bool = False
    extra_rows: bool = True


def slot_count(n_pairs: int, n_rows: int) -> int:
    """Edge slots for `n_pairs` pairs among `n_rows` rows: one more when the two counts are
    equal, since the interception tells node-indexed tensors by their leading size."""
    return n_pairs + (n_pairs == n_rows)


def padded_rows(values: torch.Tensor, count: int, fill: int = 0) -> torch.Tensor:
    """`values` with rows of `fill` appended up to `count` rows."""
    return torch.cat([values, values.new_full((count - values.shape[0], *values.shape[1:]), fill)])


def _edge_rows(values: torch.Tensor, slots: int) -> torch.Tensor:
    """Per-pair `values` padded with zeros to `slots` rows; `values` itself when they fill
    them (pair tensors are large, and copying them was a tenth of a rebuild)."""
    return values if values.shape[0] == slots else padded_rows(values, slots)


def padded_pairs(
    pairs: torch.Tensor, units: torch.Tensor | None, n_rows: int, slots: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`pairs` (2, E) and their lattice `units` (E, 3; None: zero) in `slots` edge slots,
    the empty ones holding the sentinel row `n_rows` at zero units. Tensors that need no
    padding are returned as they are (shared, not copied)."""
    pairs = pairs.long()
    if slots > pairs.shape[1]:
        sentinels = pairs.new_full((2, slots - pairs.shape[1]), n_rows)
        pairs = torch.cat([pairs, sentinels], 1)
    return pairs, _edge_rows(_units(units, pairs.device), slots)


def _units(units: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """Lattice `units` (n, 3) as integers; None (zero): none, padding fills them."""
    return torch.zeros(0, 3, dtype=torch.long, device=device) if units is None else units.long()


def padded_view(rows: ViewRows, padding: Padding) -> HaloView:
    """Pad `rows` and their pairs to their capacities.

    Padding rows get `padding.species`, id -1 and far-apart positions. Empty edge slots hold
    the sentinel `n_rows`, or a far pair (`Padding.far_pairs`), which a cutoff-safe model
    weighs exactly zero. The row count is bumped until it differs from the slot count and
    from 1 (see `Padding.extra_rows`), so that no per-edge or per-system tensor looks
    node-indexed.
    """
    positions, pairs = rows.positions, rows.pairs
    device = positions.device
    n_local, n_pairs = rows.plan.n_local, pairs.shape[1]
    slots = padding.edge_capacity(n_pairs)
    n_rows = padding.node_capacity(n_local + 2 if padding.far_pairs else n_local)
    if padding.extra_rows:
        while n_rows in (slots, 1):
            n_rows += 1
    else:
        n_rows = n_rows or 2
        slots = slot_count(slots, n_rows)
    n_pad = n_rows - n_local

    edge_index, edge_units = padded_pairs(pairs, rows.pair_units, n_rows, slots)
    if padding.far_pairs:
        edge_index[:, n_pairs:] = far_pairs(n_local, n_pad, range(n_pairs, slots), device)
    built_shifts = rows.built_shifts
    if built_shifts is not None:
        cell, pair_shifts = built_shifts
        built_shifts = (cell.detach().clone(), _edge_rows(pair_shifts, slots))
    spacing = padding.spacing
    reach = positions.abs().max() if n_local else positions.new_zeros(())
    steps = torch.arange(1, n_pad + 1, device=device, dtype=positions.dtype)
    far = positions.new_zeros(n_pad, 3)
    far[:, 0] = reach + 10.0 * spacing + 2.0 * spacing * steps
    wrapped = rows.wrapped_axes
    return HaloView(
        plan=rows.plan,
        n_rows=n_rows,
        image_units=padded_rows(_units(rows.image_units, device), n_rows),
        atomic_numbers=padded_rows(rows.atomic_numbers.long(), n_rows, padding.species),
        global_ids=padded_rows(rows.global_ids.long(), n_rows, -1),
        edge_index=edge_index,
        edge_unit_shifts=edge_units,
        padding_positions=far,
        wrapped_axes=(
            torch.zeros(3, dtype=torch.bool, device=device)
            if wrapped is None
            else wrapped.reshape(3).to(device=device, dtype=torch.bool)
        ),
        built_shifts=built_shifts,
    )


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


@dataclass(frozen=True)
class PairListing:
    """Which pairs a view lists: those closer than `radius` (Å: cutoff + skin) that touch
    an owned row, and with `ghost_radius` those closer than it between two ghost rows."""

    radius: float
    ghost_radius: float | None = None


def build_halo_view(
    comm: Communicator,
    partitioner: SpatialPartitioner,
    owned: Batch,
    padding: Padding,
    pairs: PairListing | None = None,
) -> HaloView:
    """Select ghosts, build the plan and the neighbour list of this rank's `owned` atoms
    (collective) and pad them. Without `pairs` the view has no pairs (an evaluation that
    lists its own, such as chunks of the view)."""
    owned_positions = owned.positions.detach()
    cell = owned.cell[0].detach()
    device = owned_positions.device
    n_owned = owned_positions.shape[0]
    owner_rank, owner_row, ghost_units = _receive_ghosts(comm, partitioner, owned_positions)
    plan = HaloPlan.build(comm, n_owned, owner_rank, owner_row).to(device)

    def local_rows(values: torch.Tensor) -> torch.Tensor:
        rows = torch.cat([values, values.new_zeros((plan.n_ghost, *values.shape[1:]))])
        return fill_ghosts_(rows, plan, comm)

    _, wrap = partitioner.owned_fractional(owned_positions, comm.rank)
    units = torch.cat([-wrap, ghost_units.to(device)])
    with torch.no_grad():
        local = local_rows(owned_positions) + rows_times_3x3(units, cell)
    wrapped = partitioner.wrapped_axes.to(device)
    listing = pairs
    pairs = torch.empty(2, 0, dtype=torch.long, device=device)
    pair_units, built_shifts = torch.empty(0, 3, dtype=torch.long, device=device), None
    if listing is not None:
        listed = build_neighbor_list(local, cell, wrapped, listing.radius, touching=n_owned)
        pairs, pair_units, shifts = listed.edge_index, listed.unit_shifts, listed.shifts
        if listing.ghost_radius is not None:
            among = build_neighbor_list(local, cell, wrapped, listing.ghost_radius)
            ghosts = (among.edge_index >= n_owned).all(0)
            pairs = torch.cat([pairs, among.edge_index[:, ghosts]], 1)
            pair_units = torch.cat([pair_units, among.unit_shifts[ghosts]])
            shifts = torch.cat([shifts, among.shifts[ghosts]])
        built_shifts = (cell, shifts)
    per_row = torch.stack([owned.atomic_numbers.long(), owned.global_ids.long()], 1)
    numbers, ids = local_rows(per_row).unbind(1)
    rows = ViewRows(plan, local, numbers, ids, pairs, units, pair_units, wrapped, built_shifts)
    return padded_view(rows, padding)


def chunk_view(
    positions: torch.Tensor,
    atomic_numbers: torch.Tensor,
    cell: torch.Tensor,
    wrapped: torch.Tensor,
    chunk: tuple[torch.Tensor, torch.Tensor, int],
    cutoff: float,
) -> tuple[HaloView, torch.Tensor]:
    """A `chunk_grid.chunk_rows` chunk of `positions` in `cell` (3, 3) as a view exchanging
    nothing (its own atoms owned, `global_ids` the rows of `positions` its rows image, the
    pairs within `cutoff` among them, wrapping along `wrapped`), and its rows' positions."""
    atoms, units, n_owned = chunk
    with torch.enable_grad():
        rows = positions.index_select(0, atoms) + rows_times_3x3(units.to(positions.dtype), cell)
    listed = build_neighbor_list(rows.detach(), cell, wrapped, cutoff)
    nothing = atoms.new_empty(0)
    plan = HaloPlan(n_owned, atoms.shape[0], *(nothing,) * 4)
    numbers, pairs = atomic_numbers.index_select(0, atoms), listed.edge_index
    found = ViewRows(plan, rows.detach(), numbers, atoms, pairs, units, listed.unit_shifts, wrapped)
    return padded_view(found, Padding(0, cutoff, extra_rows=False)), rows  # no padding rows
