"""Graph partition: each rank owns a fixed index shard of the atoms, not a region of space.

Ownership is fixed once (`index_owners`: contiguous slices of a Morton order; no migration);
each rank keeps only the ids of its own shard. At each rebuild a rank builds only the edges
around its own atoms, in memory and time O(its atoms + the atoms near them): it bins its
atoms on a grid at least cutoff + skin thick (`BinGrid`), every rank learns every rank's
occupied bins as a few runs of keys (`KeyRuns`, one small all-gather), and each rank sends
the ranks whose bins touch its own only its atoms in bins next to theirs. The neighbour list
of its atoms plus those at cutoff + skin keeps the edges that touch an atom it owns; the
atoms at their other ends become its ghost rows, each atom at most once and at its own
position (no periodic images: edges carry lattice shifts, and a model that builds its own
radius graph with minimum-image vectors sees every pair once). The layout is a `HaloView`
whose plan names each ghost's owner rank and row (a halo by ids), so the engine runs it
unchanged: ghost rows of every aggregation onto atoms are refreshed from their owners and
gradients that reach ghost rows are summed back into them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from nvdd_plugins.comm import Communicator, HaloPlan
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.decomposition import BinGrid, IndexPartitioner, KeyRuns, index_owners
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.distributed_model.rows.view_build import Padding, ViewRows, padded_view
from nvdd_plugins.geometry import VerletState, build_neighbor_list

__all__ = ["GraphDomain", "build_graph_view"]

_IDS = {"global_ids": (torch.long, ())}


class GraphDomain:
    """Decomposition state of one rank for graph partition (the interface of `HaloDomain`).

    Call `setup` once with the full system (on rank 0; None elsewhere); when `verlet` goes
    stale `select_owned` (every rank holds the full system) or
    `migrate` (a no-op: atoms never change owner), then `build`.
    """

    def __init__(self, comm: Communicator, config: DomainConfig) -> None:
        if config.compile:
            raise ValueError("graph partition runs eagerly: compile=True is not supported")
        self.comm = comm
        self.config = config
        self.partitioner: IndexPartitioner | None = None
        self.view: HaloView | None = None
        self.rebuilds = 0  # views built so far
        self.migrated = 0  # stays 0: no migration
        self._pbc: torch.Tensor | None = None
        self.verlet = VerletState(config.skin, config.rebuild_threshold)

    def setup(self, full: Batch | None) -> None:
        """Fix every atom's owner from the full system held by rank 0 and hand each rank the
        ids of its shard (collective)."""
        pbc, ids, owner = None, {}, None
        if self.comm.rank == 0:
            if full is None or full.num_graphs != 1:
                raise ValueError("graph partition needs one full system on rank 0")
            given = full.get("global_ids")
            ids = {"global_ids": torch.arange(full.num_nodes) if given is None else given}
            pbc = full.pbc[0].cpu()
            owner = index_owners(full.positions, full.cell[0], pbc, self.comm.size)
        self._pbc = self.comm.broadcast_object(pbc, src=0)
        mine = self.comm.scatter_rows(ids, owner, _IDS)["global_ids"]
        self.partitioner = IndexPartitioner(torch.sort(mine.long()).values, self.comm.size)
        self.view = None
        self.verlet.reset()

    def _partitioner(self) -> IndexPartitioner:
        if self.partitioner is None:
            raise RuntimeError("GraphDomain.setup(full_system) must run first")
        return self.partitioner

    def owners(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Owning rank of each atom of the full system `setup` was given, in its order (the
        same positions and cell: ownership is a function of them, fixed afterwards)."""
        if self._pbc is None:
            raise RuntimeError("GraphDomain.setup(full_system) must run first")
        return index_owners(positions, cell, self._pbc, self.comm.size).to(positions.device)

    def migrate(self, owned: Batch) -> None:
        """Nothing moves: every atom keeps the owner `setup` gave it."""

    def select_owned(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Indices (= global ids) of the atoms this rank owns when every rank holds the full
        system."""
        return self._partitioner().owned.to(positions.device)

    def build(self, owned: Batch) -> HaloView:
        """Find the atoms near this rank's, pick ghosts by the neighbour list and build plan
        and view for the current owned atoms (collective)."""
        self._partitioner()
        view = build_graph_view(self.comm, owned, self.config.halo_width)
        self.view = view
        self.verlet.record(owned.positions.detach(), owned.cell[0].detach())
        self.rebuilds += 1
        return view

    def checkpoint_state(self) -> dict[str, Any]:
        """Checkpoints of graph-partition runs are not supported."""
        raise NotImplementedError("checkpoints are supported for StrategyKind.HALO runs only")

    def restore(self, *args: Any, **kwargs: Any) -> None:
        """Checkpoints of graph-partition runs are not supported."""
        raise NotImplementedError("checkpoints are supported for StrategyKind.HALO runs only")


class NearAtoms(NamedTuple):
    """Atoms of other ranks that may lie within the width of this rank's, ordered by owner
    rank, then by their row there: owner `rank` and `row` (CPU), `global_ids`,
    `atomic_numbers` and `positions` (on the owned atoms' device)."""

    rank: torch.Tensor
    row: torch.Tensor
    global_ids: torch.Tensor
    atomic_numbers: torch.Tensor
    positions: torch.Tensor


def near_atoms(comm: Communicator, owned: Batch, width: float) -> NearAtoms:
    """Every atom of another rank within `width` (Å) of one of `owned`'s, at any periodic
    image, and a few more (those in adjacent bins) (collective). Each rank all-gathers the
    runs of occupied bins and exchanges atoms only with the ranks whose bins touch its own."""
    positions = owned.positions.detach()
    device = positions.device
    grid = BinGrid.of(owned.cell[0], owned.pbc[0], width)
    bins = grid.bins(positions)
    keys, inverse = torch.unique(BinGrid.keys(bins), return_inverse=True)
    own_bins = bins.new_empty(keys.shape[0], 3)
    own_bins[inverse] = bins
    runs = [KeyRuns(table) for table in comm.all_gather(KeyRuns.of(keys).table)]
    around = BinGrid.keys(grid.around(own_bins))  # (bins, 27)
    reach = torch.unique(around)
    rows = {
        peer: torch.nonzero(runs[peer].contains(around).any(dim=1)[inverse]).flatten()
        for peer in range(comm.size)
        if peer != comm.rank and runs[peer].meets(reach)
    }
    per_atom = torch.stack(
        [owned.global_ids.long().cpu(), owned.atomic_numbers.long().cpu(), torch.arange(len(bins))],
        dim=1,
    )
    got = comm.exchange_variable(
        {peer: per_atom[r] for peer, r in rows.items()}, template=per_atom[:0]
    )
    sources = sorted(peer for peer, message in got.items() if message.shape[0])
    counts = {peer: int(got[peer].shape[0]) for peer in sources}
    sends = {peer: positions[r.to(device)] for peer, r in rows.items() if r.numel()}
    moved = comm.exchange(sends, counts, template=positions[:0])
    received = torch.cat([got[p] for p in sources] + [per_atom[:0]])
    ranks = [torch.full((counts[p],), p, dtype=torch.long) for p in sources]
    return NearAtoms(
        torch.cat([*ranks, torch.empty(0, dtype=torch.long)]),
        received[:, 2],
        received[:, 0].to(device),
        received[:, 1].to(device),
        torch.cat([moved[p] for p in sources] + [positions[:0]]),
    )


def build_graph_view(comm: Communicator, owned: Batch, width: float) -> HaloView:
    """This rank's graph-partition view of its `owned` atoms (collective): owned rows in the
    given order, then the ghosts its edges reach, ordered by owner rank and row; edges are
    the pairs within `width` (Å) that touch an owned row. Costs O(own + near atoms) per rank
    (and one all-gather of every rank's bin runs), once per rebuild."""
    positions = owned.positions.detach()
    device = positions.device
    n_owned = positions.shape[0]
    near = near_atoms(comm, owned, width)
    local = torch.cat([positions, near.positions])
    pbc = owned.pbc[0]
    listed = build_neighbor_list(local, owned.cell[0].detach(), pbc, width, touching=n_owned)
    reached = torch.zeros(local.shape[0], dtype=torch.bool, device=device)
    reached[listed.edge_index.flatten()] = True
    ghosts = torch.nonzero(reached[n_owned:]).flatten()  # in `near`'s order
    ghosts_cpu = ghosts.cpu()
    plan = HaloPlan.build(comm, n_owned, near.rank[ghosts_cpu], near.row[ghosts_cpu]).to(device)

    local_row = torch.full((local.shape[0],), -1, dtype=torch.long, device=device)
    kept = torch.cat([torch.arange(n_owned, device=device), n_owned + ghosts])
    local_row[kept] = torch.arange(kept.numel(), device=device)
    numbers = torch.cat([owned.atomic_numbers.long(), near.atomic_numbers])
    ids = torch.cat([owned.global_ids.long(), near.global_ids])
    rows = ViewRows(plan, local[kept], numbers[kept], ids[kept], local_row[listed.edge_index])
    rows = dataclasses.replace(rows, pair_units=listed.unit_shifts, wrapped_axes=pbc)
    return padded_view(rows, Padding(_padding_species(comm, numbers), width, extra_rows=False))


def _padding_species(comm: Communicator, numbers: torch.Tensor) -> int:
    """The smallest atomic number of the system (collective): a species the model knows,
    for the padding rows of a rank that owns nothing."""
    # float64 on every rank, also one that holds no atoms: MPI needs equal buffers
    inf = torch.tensor(float("inf"), dtype=torch.float64)
    local = numbers.min().double().cpu() if numbers.numel() else inf
    smallest = float(comm.all_reduce(local.reshape(1), "min"))
    return int(smallest) if smallest != float("inf") else 1
