"""Graph partition: each rank owns a fixed index shard of the atoms, not a region of space.

Ownership is fixed once (`IndexPartitioner`: contiguous slices of a Morton order; no
migration). At each rebuild every rank gathers all positions, builds the neighbour list of the
whole system at cutoff + skin and keeps the edges that touch an atom it owns; the atoms at
their other ends become its ghost rows, each atom at most once and at its own position (no
periodic images: edges carry lattice shifts, and a model that builds its own radius graph
with minimum-image vectors sees every pair once). The layout is a `HaloView` whose plan names
each ghost's owner rank and row (a halo by ids), so the engine runs it unchanged: ghost rows
of every aggregation onto atoms are refreshed from their owners and gradients that reach
ghost rows are summed back into them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from nvdd_plugins.comm import Communicator, HaloPlan
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.decomposition import IndexPartitioner, index_owners
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.distributed_model.rows.view_build import Padding, ViewRows, padded_view
from nvdd_plugins.geometry import VerletState, build_neighbor_list

__all__ = ["GraphDomain", "build_graph_view"]


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
        """Fix every atom's owner from the full system held by rank 0 (collective)."""
        payload = None
        if self.comm.rank == 0:
            if full is None or full.num_graphs != 1:
                raise ValueError("graph partition needs one full system on rank 0")
            ids = full.get("global_ids")
            ids = torch.arange(full.num_nodes) if ids is None else ids
            pbc = full.pbc[0].cpu()
            partitioner = IndexPartitioner.from_system(
                full.positions, full.cell[0], pbc, ids, self.comm.size
            )
            payload = (partitioner.owner, pbc)
        owner, self._pbc = self.comm.broadcast_object(payload, src=0)
        self.partitioner = IndexPartitioner(owner, self.comm.size)
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
        return self._partitioner().owned_ids(self.comm.rank).to(positions.device)

    def build(self, owned: Batch) -> HaloView:
        """Gather all positions, pick ghosts by the neighbour list and build plan and view
        for the current owned atoms (collective)."""
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


def build_graph_view(comm: Communicator, owned: Batch, width: float) -> HaloView:
    """This rank's graph-partition view of its `owned` atoms (collective): owned rows in the
    given order, then the ghosts its edges reach, ordered by owner rank and row; edges are
    the pairs within `width` (Å) that touch an owned row. Costs O(all atoms) per rank, once
    per rebuild."""
    owned_positions = owned.positions.detach()
    device = owned_positions.device
    gathered_ids = comm.all_gather(owned.global_ids.long())
    counts = [int(g.shape[0]) for g in gathered_ids]
    ids = torch.cat(gathered_ids).to(device)
    positions = torch.cat(comm.all_gather(owned_positions))
    numbers = torch.cat(comm.all_gather(owned.atomic_numbers.long())).to(device)
    rank_of = torch.repeat_interleave(torch.arange(comm.size), torch.tensor(counts))
    row_of = torch.cat([torch.arange(c) for c in counts])
    start, n_owned = sum(counts[: comm.rank]), counts[comm.rank]

    pbc = owned.pbc[0]
    listed = build_neighbor_list(positions, owned.cell[0].detach(), pbc, width)
    mine = (rank_of == comm.rank).to(device)
    senders, receivers = listed.edge_index
    touches = mine[senders] | mine[receivers]
    pairs, units = listed.edge_index[:, touches], listed.unit_shifts[touches]
    ends = pairs.flatten()
    ghosts = torch.unique(ends[~mine[ends]])  # gathered order: by owner rank, then row
    plan = HaloPlan.build(comm, n_owned, rank_of[ghosts.cpu()], row_of[ghosts.cpu()]).to(device)

    local_row = torch.full((positions.shape[0],), -1, dtype=torch.long, device=device)
    local_row[start : start + n_owned] = torch.arange(n_owned, device=device)
    local_row[ghosts] = torch.arange(n_owned, n_owned + ghosts.numel(), device=device)
    rows = torch.cat([torch.arange(start, start + n_owned, device=device), ghosts])
    species = int(numbers.min()) if numbers.numel() else 1
    local = ViewRows(plan, positions[rows], numbers[rows], ids[rows], local_row[pairs])
    local = dataclasses.replace(local, pair_units=units, wrapped_axes=pbc)
    return padded_view(local, Padding(species, width, extra_rows=False))
