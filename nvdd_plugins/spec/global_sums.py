"""Marks for a sum over every atom of a system inside a forward (a charge total, Ewald's
structure factors, a PME charge mesh): each rank sums the atoms it owns, then the partial
sums are added over the ranks.

Both marks are the identity in one process. In a distributed forward `GLOBAL_SUM_ADAPTERS`
(in the spec's `custom_ops`) turn `owned_part` into `SliceOwned` (the rank's owned rows,
so no atom is counted twice and ghost rows are left out) and `summed_over_ranks` into
`AllReduceSum` (whose backward sums the gradients over the ranks, so forces and stress
stay derivatives of the total energy).

A global sum too large to replicate on every rank (a PME charge mesh of millions of points)
can instead be kept distributed by the model's own collective code: `mesh_ranks()` gives
it the ranks of a distributed forward (None in one process), with a differentiable
all-to-all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from nvdd_plugins.spec.adapters import OpAdapter
from nvdd_plugins.spec.marks import dispatched
from nvdd_plugins.spec.transforms import AllReduceSum, SliceOwned

__all__ = [
    "GLOBAL_SUM_ADAPTERS",
    "MeshRanks",
    "forward_on_ranks",
    "mesh_ranks",
    "owned_part",
    "summed_over_ranks",
]


@dataclass(frozen=True)
class MeshRanks:
    """The ranks of a distributed forward, for a model that distributes a global array
    itself (a distributed FFT). All ranks run the same collectives in the same order.

    Attributes:
        rank: this rank.
        size: the number of ranks.
        all_to_all: `(x, send_counts, recv_counts) -> rows received`: the rows of `x` in
            blocks of `send_counts[q]` for each rank q, exchanged; differentiable
            (`nvdd_plugins.comm.all_to_all_rows`).
        all_gather: every rank's tensor (not differentiable: sizes, index ranges).
    """

    rank: int
    size: int
    all_to_all: Callable[[torch.Tensor, Sequence[int], Sequence[int]], torch.Tensor]
    all_gather: Callable[[torch.Tensor], list[torch.Tensor]]


_RANKS: ContextVar[MeshRanks | None] = ContextVar("nvdd_mesh_ranks", default=None)


def mesh_ranks() -> MeshRanks | None:
    """The ranks of the distributed forward running now (more than one), else None."""
    return _RANKS.get()


@contextmanager
def forward_on_ranks(ranks: MeshRanks | None) -> Iterator[None]:
    """Inside the block (this thread), `mesh_ranks()` returns `ranks` (the engine's)."""
    token = _RANKS.set(ranks)
    try:
        yield
    finally:
        _RANKS.reset(token)


def owned_part(tensor: torch.Tensor) -> torch.Tensor:
    """Identity in one process. In a distributed forward adapted with `SliceOwned`
    (`GLOBAL_SUM_ADAPTERS`), the rows of the atoms this rank owns (a per-atom `tensor`)."""
    handled = dispatched(owned_part, tensor)  # by the interception mode
    return tensor if handled is None else handled


def summed_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """Identity in one process. In a distributed forward adapted with `AllReduceSum`,
    `tensor` is this rank's partial of a per-system sum and the result is the sum over all
    ranks (the same on every rank)."""
    handled = dispatched(summed_over_ranks, tensor)  # by the interception mode
    return tensor if handled is None else handled


GLOBAL_SUM_ADAPTERS: tuple[OpAdapter, ...] = (
    OpAdapter(op=owned_part, output_transforms={0: SliceOwned()}),
    OpAdapter(op=summed_over_ranks, output_transforms={0: AllReduceSum()}),
)
"""The adapters that distribute `owned_part` and `summed_over_ranks`."""
