"""`HaloDomain`: one rank's decomposition state — frame, ownership, ghosts, rebuilds."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from nvdd_plugins.comm import Communicator, TimedCommunicator
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch, FieldLevel
from nvdd_plugins.decomposition import (
    DecompositionFrame,
    Reduce,
    SpatialPartitioner,
    StaggeredCuts,
    in_one_process,
    owned_counts,
    rebalanced,
    row_counts,
)
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.distributed_model.rows.view_build import Padding, PairListing, build_halo_view
from nvdd_plugins.geometry import VerletState

__all__ = ["HaloDomain"]

logger = logging.getLogger(__name__)


class HaloDomain:
    """Decomposition state of one rank for the halo strategy.

    Call `setup` once with the full system (on rank 0; None elsewhere is fine); when `verlet`
    (the state of the last rebuild: reference and padded capacities) goes stale, either
    `migrate` (each rank holds only its atoms) or `select_owned` (every rank holds the full
    system), then `build`. `halo_width` (Å) is the ghost shell's; without `list_pairs` views
    are built without pairs (for an evaluation that lists its own, such as chunks); with
    `ghost_pair_cutoff` (Å) they list the pairs between two ghosts closer than it (+ skin).
    """

    def __init__(
        self,
        comm: Communicator,
        config: DomainConfig,
        halo_width: float,
        list_pairs: bool = True,
        ghost_pair_cutoff: float | None = None,
    ) -> None:
        self.comm = comm
        self.config = config
        self.halo_width = float(halo_width)
        self.list_pairs = list_pairs
        skin = config.skin
        self.pairs = PairListing(
            config.cutoff + skin, None if ghost_pair_cutoff is None else ghost_pair_cutoff + skin
        )
        self.partitioner: SpatialPartitioner | None = None
        self.view: HaloView | None = None
        self.padding_species = 1
        self.rebuilds = 0  # views built so far
        self.migrated = 0  # atoms this rank received by migration so far
        self.rebalances = 0  # times the cuts moved to balance the load (setup included)
        self.wrap = True  # wide unsplit periodic axes wrap (`image_periodic_axes`)
        growth = config.capacity_growth if config.fixed_shapes else None
        self.verlet = VerletState(config.skin, config.rebuild_threshold, growth)

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, full: Batch | None) -> None:
        """Fix the frame and rank grid from the full system held by rank 0 (collective)."""
        payload = None
        if self.comm.rank == 0:
            if full is None or full.num_graphs != 1:
                raise ValueError("domain decomposition needs one full system on rank 0")
            frame = DecompositionFrame.from_system(
                full.positions.detach(), full.cell[0], full.pbc[0]
            )
            species = int(full.atomic_numbers.min()) if full.num_nodes else 1
            payload = (frame.origin.cpu(), frame.box.cpu(), frame.pbc.cpu(), species)
        origin, box, pbc, self.padding_species = self.comm.broadcast_object(payload, src=0)
        frame = DecompositionFrame(origin, box, pbc)
        self.partitioner = SpatialPartitioner(
            frame, self.comm.size, self.config.grid, self.halo_width, wrap=self.wrap
        )
        self.balance_from_root(full.positions if self.comm.rank == 0 and full is not None else None)
        self.view = None
        self.verlet.reset()
        logger.info("rank grid %s over %d ranks", self.partitioner.grid, self.comm.size)

    def image_periodic_axes(self) -> None:
        """From the next build on, ghosts image every periodic axis instead of pairs wrapping
        across its faces (the heat flux needs every image an explicit row); the next
        rebuild check answers True where a view wrapped. Stays so; collective use only."""
        if not self.wrap:
            return
        self.wrap = False
        partitioner = self.partitioner
        if partitioner is None or not bool(partitioner.wrapped_axes.any()):
            return
        self.partitioner = SpatialPartitioner(
            partitioner.frame, self.comm.size, None, self.halo_width, partitioner.cuts, False
        )
        self.view = None
        self.verlet.reset()

    # -- load balance ---------------------------------------------------------------------
    def balance_from_root(self, positions: torch.Tensor | None) -> None:
        """Balance the cuts for the full system's `positions` held by rank 0 (None
        elsewhere), when `DomainConfig.balance` is on and the current cuts' owned atoms
        exceed the threshold (collective: rank 0 decides and broadcasts)."""
        cuts = None
        if self.comm.rank == 0 and positions is not None:
            partitioner = self._partitioner()
            at = positions.detach().to(partitioner.frame.box)
            cuts = self._balanced(at, in_one_process, timed=False)
        self._adopt(self.comm.broadcast_object(cuts, src=0))

    def rebalance(self, positions: torch.Tensor, cell: torch.Tensor, replicated: bool) -> None:
        """Move the cuts when this rank's atoms at `positions` (every rank's together, or
        with `replicated` the full system each rank holds alike) leave the cost per rank
        (`DomainConfig.balance_weight`) more unequal than `DomainConfig.balance_threshold`
        (max / mean). Collective; a balanced run pays one all-reduce of one number per rank."""
        self._follow_cell(cell.detach(), positions.device)
        reduce = in_one_process if replicated else self.comm.all_reduce
        self._adopt(self._balanced(positions.detach(), reduce, timed=True))

    def _balanced(
        self, positions: torch.Tensor, reduce: Reduce, timed: bool
    ) -> StaggeredCuts | None:
        """Cuts balancing the ranks' cost (`DomainConfig.balance_weight`; time only when
        `timed`: every rank takes part) at `positions` (summed by `reduce`), or None (off,
        within the threshold, or no better)."""
        if self.config.balance == "off":
            return None
        counted = row_counts if self.config.balance_weight == "rows" else owned_counts

        def cost_of(partitioner: SpatialPartitioner) -> torch.Tensor:
            return counted(partitioner, positions, reduce)

        seconds = self._measured_seconds() if timed else None
        partitioner, threshold = self._partitioner(), self.config.balance_threshold
        costs = cost_of(partitioner) if seconds is None else seconds
        return rebalanced(
            partitioner, positions, costs, threshold, reduce, self.config.grid,
            cost_of=cost_of if seconds is None else None,
        )  # fmt: skip

    def _measured_seconds(self) -> torch.Tensor | None:
        """Each rank's compute seconds since the last call, with `balance_weight="time"`
        (collective), when every rank has timed a forward; else None (owned atoms)."""
        if self.config.balance_weight != "time" or not isinstance(self.comm, TimedCommunicator):
            return None
        mine = torch.zeros(self.comm.size, dtype=torch.float64)
        mine[self.comm.rank] = self.comm.take_computed()
        seconds = self.comm.all_reduce(mine)
        return seconds if bool((seconds > 0).all()) else None

    def _adopt(self, cuts: StaggeredCuts | None) -> None:
        """Use `cuts` (same on every rank) from now on; None keeps the current ones."""
        if cuts is None:
            return
        partitioner = self._partitioner()
        self.partitioner = SpatialPartitioner(
            partitioner.frame, self.comm.size, None, self.halo_width, cuts, self.wrap
        )
        self.rebalances += 1

    def _partitioner(self) -> SpatialPartitioner:
        if self.partitioner is None:
            raise RuntimeError("HaloDomain.setup(full_system) must run first")
        return self.partitioner

    def _follow_cell(self, cell: torch.Tensor, device: torch.device) -> SpatialPartitioner:
        """The partitioner for the current cell (rebuilt only when the cell changed)."""
        partitioner = self._partitioner()
        current = partitioner.frame.box
        frame = partitioner.frame.to(device, cell.dtype).with_cell(cell)
        same_place = current.device == device and current.dtype == cell.dtype
        if same_place and torch.equal(frame.box, current):
            return partitioner
        self.partitioner = SpatialPartitioner(
            frame, self.comm.size, None, self.halo_width, partitioner.cuts, self.wrap
        )
        return self.partitioner

    # -- rebuilds -------------------------------------------------------------------------
    def destinations(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Owner rank of each of this rank's atoms; with hysteresis, atoms within that
        distance of this sub-domain stay."""
        dest = self.owners(positions, cell)
        partitioner = self._partitioner()
        h = self.config.migration_hysteresis
        if h > 0 and positions.shape[0]:
            home, _ = partitioner.home_fractional(positions)
            lo, hi = partitioner.bounds(self.comm.rank, home)
            index = torch.tensor(partitioner.domain_index(self.comm.rank), device=home.device)
            grid = torch.tensor(partitioner.grid, device=home.device)
            pbc = partitioner.frame.pbc.to(home.device)
            reach = h / partitioner.frame.widths.to(home.device)
            offsets = torch.tensor([-1.0, 0.0, 1.0], device=home.device, dtype=home.dtype)
            shifted = home.unsqueeze(-1) + offsets * pbc.unsqueeze(-1)
            outside = (
                torch.clamp(
                    torch.maximum(lo.unsqueeze(-1) - shifted, shifted - hi.unsqueeze(-1)), min=0
                )
                .min(dim=-1)
                .values
            )
            open_low = ~pbc & (index == 0)
            open_high = ~pbc & (index == grid - 1)
            below = home < lo
            outside = torch.where((open_low & below) | (open_high & ~below), 0.0, outside)
            stay = (outside <= reach).all(dim=1)
            dest = torch.where(stay, torch.full_like(dest, self.comm.rank), dest)
        return dest

    def migrate(self, owned: Batch) -> None:
        """Send atoms that left this sub-domain to their new owners; keep the batch sorted by
        global id. Collective; replaces the per-atom fields of `owned` in place."""
        ids = owned.global_ids
        if self.comm.size == 1 and bool((ids[1:] > ids[:-1]).all()):
            return  # one rank owns every atom, in id order: nothing to balance or send
        self.rebalance(owned.positions, owned.cell[0], replicated=False)
        dest = self.destinations(owned.positions.detach(), owned.cell[0].detach())
        me = self.comm.rank
        leaving = {
            int(q): torch.nonzero(dest == q).flatten() for q in torch.unique(dest) if q != me
        }
        arrived_ids = self.comm.exchange_variable(
            {q: ids[idx] for q, idx in leaving.items()}, template=ids
        )
        counts = {q: int(t.shape[0]) for q, t in arrived_ids.items() if q != me}
        self.migrated += sum(counts.values())
        if not leaving and not counts and bool((ids[1:] > ids[:-1]).all()):
            return  # no atom leaves or arrives, and the batch is sorted already
        stay = dest == me
        fields = {}
        # one message per dtype: the fields of a dtype travel as the columns of one block
        by_dtype: dict[torch.dtype, list[tuple[str, torch.Tensor]]] = {}
        present = []
        for name, value in owned.fields(level=FieldLevel.NODE):
            by_dtype.setdefault(value.dtype, []).append((name, value))
            present.append(name)
        for group in by_dtype.values():
            widths = [math.prod(value.shape[1:]) for _, value in group]
            columns = [v.reshape(v.shape[0], w) for (_, v), w in zip(group, widths, strict=True)]
            block = torch.cat(columns, dim=1)
            moved = self.comm.exchange(
                {q: block[idx] for q, idx in leaving.items()}, counts, template=block
            )
            block = torch.cat([block[stay], *(moved[q] for q in sorted(moved))])
            for (name, value), column in zip(group, block.split(widths, dim=1), strict=True):
                fields[name] = column.reshape(-1, *value.shape[1:])
        order = torch.argsort(fields["global_ids"])
        # in the fields' own order: every rank must list them alike (collectives pair them up)
        owned.set_nodes({name: fields[name][order] for name in present})

    def owners(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Owning rank of each position for the current cell (no hysteresis)."""
        partitioner = self._follow_cell(cell.detach(), positions.device)
        return partitioner.rank_of(positions.detach())

    def select_owned(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Indices of the atoms this rank owns when every rank holds the full system (the
        same `positions` on every rank), after balancing the cuts for them if needed."""
        self.rebalance(positions, cell, replicated=True)
        return torch.nonzero(self.owners(positions, cell) == self.comm.rank).flatten()

    def build(self, owned: Batch) -> HaloView:
        """Select ghosts and build plan, view and neighbour list for the current owned atoms."""
        positions = owned.positions.detach()
        cell = owned.cell[0].detach()
        partitioner = self._follow_cell(cell, positions.device)
        capacities = (self.verlet.rows.fit, self.verlet.pairs.fit)
        padding = Padding(
            self.padding_species, partitioner.halo_width, *capacities, self.config.fixed_shapes
        )
        pairs = self.pairs if self.list_pairs else None
        view = build_halo_view(self.comm, partitioner, owned, padding, pairs)
        self.view = view
        self.verlet.record(positions, cell)
        self.rebuilds += 1
        return view

    # -- checkpoints ----------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of this rank's decomposition: the "frame", rank "grid" and
        its "cuts", the "padding_species", the padded "capacities" (node rows, edge slots)
        and "reference": the owned positions (in the owned order) and the cell of the last
        rebuild, or None before the first rebuild."""
        partitioner = self._partitioner()
        return {
            "frame": partitioner.frame,
            "grid": tuple(partitioner.grid),
            "cuts": partitioner.cuts.to("cpu"),
            "padding_species": self.padding_species,
            "capacities": (self.verlet.rows.value, self.verlet.pairs.value),
            "reference": self.verlet.reference,
        }

    def restore(
        self,
        frame: DecompositionFrame,
        grid: tuple[int, int, int] | None,
        padding_species: int,
        capacities: tuple[int, int] | None = None,
        cuts: StaggeredCuts | None = None,
    ) -> None:
        """Resume a checkpointed decomposition instead of `setup`: its frame, rank grid
        (None: the minimal-surface grid) or `cuts` (None: the regular grid; at another rank
        count `balance_from_root` balances afresh), padding species and this rank's padded
        `capacities` (meaningful at the same rank count only). Then `build` the owned atoms
        at their positions and cell of the last rebuild to get that rebuild's view and
        rebuild reference back; without it the next evaluation rebuilds."""
        if cuts is not None:
            cuts.check()
        self.partitioner = SpatialPartitioner(
            frame, self.comm.size, grid, self.halo_width, cuts, self.wrap
        )
        self.padding_species = int(padding_species)
        self.view = None
        self.verlet.reset()
        if capacities is not None:
            self.verlet.rows.value, self.verlet.pairs.value = (int(c) for c in capacities)
