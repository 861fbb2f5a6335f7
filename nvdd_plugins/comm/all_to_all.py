"""`all_to_all_rows`: the all-to-all exchange as a differentiable operation (a distributed
FFT's transposes, a mesh redistributed between ranks).

Each rank splits the rows of its tensor into one block per rank; every rank receives the
block each rank meant for it, concatenated in rank order. The backward sends the gradients
back the same way, with the counts swapped: the exchange is a permutation of the rows over
the ranks, and its adjoint is its inverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nvdd_plugins.comm.base import Communicator

__all__ = ["all_to_all_rows"]


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        send_counts: tuple[int, ...],
        recv_counts: tuple[int, ...],
        comm: Communicator,
    ) -> torch.Tensor:
        ctx.counts, ctx.comm = (send_counts, recv_counts), comm
        return comm.all_to_all_single(x.contiguous(), send_counts, recv_counts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        send_counts, recv_counts = ctx.counts
        back = _AllToAll.apply(grad.contiguous(), recv_counts, send_counts, ctx.comm)
        return back, None, None, None


def all_to_all_rows(
    x: torch.Tensor,
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    comm: Communicator,
) -> torch.Tensor:
    """The rows of `x`, split into blocks of `send_counts[q]` rows for each rank q in order,
    exchanged over `comm` (collective): the blocks every rank sent here, of
    `recv_counts[q]` rows from rank q, concatenated in rank order. Differentiable."""
    if sum(send_counts) != x.shape[0] or len(send_counts) != comm.size:
        raise ValueError(
            f"send_counts {list(send_counts)} must split the {x.shape[0]} rows over "
            f"{comm.size} ranks"
        )
    return _AllToAll.apply(x, tuple(send_counts), tuple(recv_counts), comm)
