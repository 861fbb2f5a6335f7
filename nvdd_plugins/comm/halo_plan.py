"""`HaloPlan`: which rows a rank sends to and receives from each neighbour in a halo exchange.

Row layout on every rank: owned rows [0, n_owned), ghost rows [n_owned, n_local), then any
padding rows. A ghost row mirrors one owned row of some rank (possibly this one: a periodic
self-image).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nvdd_plugins.comm.base import Communicator

__all__ = ["HaloPlan"]


@dataclass(frozen=True)
class HaloPlan:
    """Per-rank halo exchange plan.

    Attributes:
        n_owned: owned rows (first in the layout).
        n_local: owned + ghost rows.
        ghost_owner_rank, ghost_owner_row: for each ghost row, the rank owning the atom and
            the atom's owned row there.
        self_src, self_dst: owned rows copied locally into ghost rows (self-images).
        send_rows: peer -> owned rows sent to that peer, in the peer's receiving order.
        recv_rows: peer -> ghost rows filled from that peer.
    """

    n_owned: int
    n_local: int
    ghost_owner_rank: torch.Tensor
    ghost_owner_row: torch.Tensor
    self_src: torch.Tensor
    self_dst: torch.Tensor
    send_rows: dict[int, torch.Tensor] = field(default_factory=dict)
    recv_rows: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def n_ghost(self) -> int:
        """Number of ghost rows."""
        return self.n_local - self.n_owned

    @property
    def exchanges(self) -> bool:
        """Whether a halo exchange moves any row on this rank (ghosts to fill, self-images,
        or owned rows a peer needs). A rank with nothing to *receive* may still have to
        *send*, so this, not `n_ghost`, decides whether a rank takes part in an exchange;
        it is consistent between every pair of peers."""
        return self.n_ghost > 0 or any(r.numel() for r in self.send_rows.values())

    @property
    def peers(self) -> tuple[int, ...]:
        """Ranks this rank exchanges with (sorted)."""
        return tuple(sorted(set(self.send_rows) | set(self.recv_rows)))

    @property
    def send_counts(self) -> dict[int, int]:
        """Rows sent to each peer."""
        return {p: int(r.shape[0]) for p, r in self.send_rows.items()}

    @property
    def recv_counts(self) -> dict[int, int]:
        """Rows received from each peer."""
        return {p: int(r.shape[0]) for p, r in self.recv_rows.items()}

    def to(self, device: torch.device | str) -> HaloPlan:
        """The same plan with its index tensors on `device`."""
        return HaloPlan(
            self.n_owned,
            self.n_local,
            self.ghost_owner_rank.to(device),
            self.ghost_owner_row.to(device),
            self.self_src.to(device),
            self.self_dst.to(device),
            {p: r.to(device) for p, r in self.send_rows.items()},
            {p: r.to(device) for p, r in self.recv_rows.items()},
        )

    @classmethod
    def from_global_ids(
        cls, comm: Communicator, owned_ids: torch.Tensor, ghost_ids: torch.Tensor
    ) -> HaloPlan:
        """Plan for a layout that names atoms by global id (e.g. LAMMPS's owned + ghosts).

        Every rank's owned ids are gathered (O(total atoms) per rank, once per rebuild) to
        find each ghost's owner rank and row; the sort and the search run on the ids'
        device, and so does the plan. Collective.
        """
        owned_ids, ghost_ids = owned_ids.long(), ghost_ids.long().to(owned_ids.device)
        device = owned_ids.device
        gathered = [g.to(device) for g in comm.all_gather(owned_ids)]
        sizes = torch.tensor([len(g) for g in gathered], device=device)
        all_ids = torch.cat(gathered)
        ranks = torch.repeat_interleave(torch.arange(len(gathered), device=device), sizes)
        rows = torch.cat([torch.arange(len(g), device=device) for g in gathered])
        sorted_ids, order = torch.sort(all_ids)
        if sorted_ids.numel() > 1 and bool((sorted_ids[1:] == sorted_ids[:-1]).any()):
            raise ValueError("an atom id is owned by more than one rank")
        slot = torch.searchsorted(sorted_ids, ghost_ids).clamp(max=max(len(sorted_ids) - 1, 0))
        if ghost_ids.numel() and (
            sorted_ids.numel() == 0 or bool((sorted_ids[slot] != ghost_ids).any())
        ):
            raise ValueError("a ghost atom id is not owned by any rank")
        owner = order[slot]
        return cls.build(comm, owned_ids.numel(), ranks[owner], rows[owner])

    @classmethod
    def build(
        cls,
        comm: Communicator,
        n_owned: int,
        ghost_owner_rank: torch.Tensor,
        ghost_owner_row: torch.Tensor,
    ) -> HaloPlan:
        """Build the plan from each ghost's (owner rank, owner row); all ranks must call it.

        Each rank tells every owner which rows it needs (one count collective plus
        point-to-point requests, through host memory), so owners learn their `send_rows`.
        The plan's tensors are on the inputs' device, where the grouping by owner runs.
        """
        ghost_owner_rank = ghost_owner_rank.long()
        ghost_owner_row = ghost_owner_row.long().to(ghost_owner_rank.device)
        if ghost_owner_rank.shape != ghost_owner_row.shape or ghost_owner_rank.dim() != 1:
            raise ValueError("ghost_owner_rank and ghost_owner_row must be equal-length 1-D")
        if ghost_owner_rank.numel() and (
            int(ghost_owner_rank.min()) < 0 or int(ghost_owner_rank.max()) >= comm.size
        ):
            raise ValueError("ghost owner rank out of range")
        device = ghost_owner_rank.device
        n_local = n_owned + ghost_owner_rank.numel()
        ghost_rows = torch.arange(n_owned, n_local, device=device)
        own = ghost_owner_rank == comm.rank
        # ghosts grouped by owner rank, each group in row order (a stable sort)
        order = torch.argsort(ghost_owner_rank, stable=True)
        counts = torch.bincount(ghost_owner_rank, minlength=comm.size).tolist()
        wanted = ghost_owner_row[order].split(counts)
        filled = ghost_rows[order].split(counts)
        peers = [p for p, c in enumerate(counts) if c and p != comm.rank]
        requests = {peer: wanted[peer].cpu() for peer in peers}
        recv_rows = {peer: filled[peer] for peer in peers}
        incoming = comm.exchange_variable(requests, template=torch.empty(0, dtype=torch.long))
        send_rows = {
            peer: rows.long().to(device) for peer, rows in incoming.items() if peer != comm.rank
        }
        for peer, rows in send_rows.items():
            if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n_owned):
                raise ValueError(f"rank {peer} asked for rows outside this rank's owned range")
        self_src = ghost_owner_row[own]
        if self_src.numel() and int(self_src.max()) >= n_owned:
            raise ValueError("a self-image ghost points outside the owned rows")
        return cls(
            n_owned=n_owned,
            n_local=n_local,
            ghost_owner_rank=ghost_owner_rank,
            ghost_owner_row=ghost_owner_row,
            self_src=self_src,
            self_dst=ghost_rows[own],
            send_rows=send_rows,
            recv_rows=recv_rows,
        )
