"""Autograd-aware halo primitives.

`halo_forward` copies owners' rows into ghost rows; its adjoint is `halo_reverse`, which
sums ghost rows into their owners and zeroes the ghosts. Each is the other's backward, so
gradients that reach ghost rows flow back to the ranks that own the atoms.
"""

from __future__ import annotations

from typing import Any

import torch

from nvdd_plugins.comm.base import Communicator
from nvdd_plugins.comm.halo_plan import HaloPlan

__all__ = [
    "add_ghosts_to_owners",
    "all_reduce_sum",
    "fill_ghosts_",
    "halo_forward",
    "halo_forward_",
    "halo_reverse",
]


def fill_ghosts_(x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """Overwrite the ghost rows of `x` in place with their owners' rows (no autograd: for
    data such as species and ids; use `halo_forward` / `halo_forward_` inside a model)."""
    if plan.self_dst.numel():
        x.index_copy_(0, plan.self_dst, x.index_select(0, plan.self_src))
    sends = {p: x.index_select(0, rows) for p, rows in plan.send_rows.items()}
    received = comm.exchange(sends, plan.recv_counts, template=x)
    for peer, rows in plan.recv_rows.items():
        x.index_copy_(0, rows, received[peer])
    return x


def add_ghosts_to_owners(y: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """A copy of `y` with ghost rows added into their owners' rows and zeroed (no autograd)."""
    x = y.clone()
    x[plan.n_owned : plan.n_local] = 0
    if plan.self_dst.numel():
        x.index_add_(0, plan.self_src, y.index_select(0, plan.self_dst))
    sends = {p: y.index_select(0, rows) for p, rows in plan.recv_rows.items()}
    received = comm.exchange(sends, plan.send_counts, template=y)
    for peer, rows in plan.send_rows.items():
        x.index_add_(0, rows, received[peer])
    return x


class _HaloForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
        ctx.plan, ctx.comm = plan, comm
        return fill_ghosts_(x.clone(), plan, comm)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _HaloReverse.apply(grad.contiguous(), ctx.plan, ctx.comm), None, None


class _HaloForwardInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
        ctx.plan, ctx.comm = plan, comm
        ctx.mark_dirty(x)
        return fill_ghosts_(x, plan, comm)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _HaloReverse.apply(grad.contiguous(), ctx.plan, ctx.comm), None, None


class _HaloReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
        ctx.plan, ctx.comm = plan, comm
        return add_ghosts_to_owners(y, plan, comm)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _HaloForward.apply(grad.contiguous(), ctx.plan, ctx.comm), None, None


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: Communicator) -> torch.Tensor:
        ctx.comm = comm
        return comm.all_reduce(x, "sum")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.comm.all_reduce(grad.contiguous(), "sum"), None


def halo_forward(x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """Owner -> ghost copy: ghost rows of `x` take their owners' rows (first dim = rows)."""
    _check_rows(x, plan)
    return _HaloForward.apply(x, plan, comm)


def halo_forward_(x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """In-place `halo_forward` (for freshly computed scatter results); returns `x`."""
    _check_rows(x, plan)
    return _HaloForwardInplace.apply(x, plan, comm)


def halo_reverse(x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """Ghost -> owner sum: ghost rows are added into their owners' rows, then zeroed."""
    _check_rows(x, plan)
    return _HaloReverse.apply(x, plan, comm)


def all_reduce_sum(x: torch.Tensor, comm: Communicator) -> torch.Tensor:
    """Sum over ranks of a per-rank partial (adjoint: the same sum of the gradients)."""
    return _AllReduceSum.apply(x, comm)


def _check_rows(x: torch.Tensor, plan: HaloPlan) -> None:
    if x.dim() == 0 or x.shape[0] < plan.n_local:
        raise ValueError(
            f"halo exchange needs at least {plan.n_local} rows (owned + ghost), got "
            f"{tuple(x.shape)}"
        )
