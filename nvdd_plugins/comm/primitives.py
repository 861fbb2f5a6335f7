"""The halo exchange and the all-reduce as differentiable torch ops, eager and compiled alike.

`copy_to_ghosts` overwrites ghost rows with their owners' rows; its adjoint,
`sum_ghosts_into_owners`, adds ghost rows into their owners' rows and zeroes them. Each is
the other's backward, so gradients that reach ghost rows flow back to the ranks that own the
atoms; `all_reduce_sum` is its own adjoint.

The ops take an integer slot, not the plan and communicator: a compiled forward would guard
on those objects' identity and recompile at every rebuild, whereas a `HaloSlot` keeps its
number while it is bound to each new plan.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import torch

from nvdd_plugins.comm.base import Communicator
from nvdd_plugins.comm.halo_plan import HaloPlan

__all__ = [
    "HaloSlot",
    "all_reduce_sum",
    "copy_to_ghosts",
    "fill_ghosts_",
    "sum_ghosts_into_owners",
]

_BINDINGS: dict[int, tuple[HaloPlan, Communicator]] = {}
_COUNTER = itertools.count()
_LOCK = threading.Lock()


class HaloSlot:
    """The number through which the halo ops reach a plan and communicator; the binding is
    dropped when this object is freed.

    Attributes:
        number: the slot number the ops take.
    """

    def __init__(self) -> None:
        with _LOCK:
            self.number = next(_COUNTER)
        weakref.finalize(self, _BINDINGS.pop, self.number, None)

    def bind(self, plan: HaloPlan, comm: Communicator) -> int:
        """Point the slot at `plan` exchanged over `comm`; returns the slot number."""
        _BINDINGS[self.number] = (plan, comm)
        return self.number


def _binding(slot: int) -> tuple[HaloPlan, Communicator]:
    try:
        return _BINDINGS[slot]
    except KeyError:
        raise RuntimeError(f"halo slot {slot} has no plan bound") from None


def fill_ghosts_(x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """Overwrite the ghost rows of `x` in place with their owners' rows and return `x` (no
    autograd: for data such as species and ids; differentiable: `copy_to_ghosts`)."""
    _check_rows(x, plan)
    if plan.self_dst.numel():
        x.index_copy_(0, plan.self_dst, x.index_select(0, plan.self_src))
    sends = {p: x.index_select(0, rows) for p, rows in plan.send_rows.items()}
    received = comm.exchange(sends, plan.recv_counts, template=x)
    for peer, rows in plan.recv_rows.items():
        x.index_copy_(0, rows, received[peer])
    return x


@torch.library.custom_op("nvdd::copy_to_ghosts", mutates_args=())
def copy_to_ghosts(x: torch.Tensor, slot: int) -> torch.Tensor:
    """A copy of `x` whose ghost rows hold their owners' rows (first dim = rows)."""
    plan, comm = _binding(slot)
    return fill_ghosts_(x.clone(), plan, comm)


@torch.library.custom_op("nvdd::sum_ghosts_into_owners", mutates_args=())
def sum_ghosts_into_owners(y: torch.Tensor, slot: int) -> torch.Tensor:
    """A copy of `y` with its ghost rows added into their owners' rows, then zeroed."""
    plan, comm = _binding(slot)
    _check_rows(y, plan)
    x = y.clone()
    x[plan.n_owned : plan.n_local] = 0
    if plan.self_dst.numel():
        x.index_add_(0, plan.self_src, y.index_select(0, plan.self_dst))
    sends = {p: y.index_select(0, rows) for p, rows in plan.recv_rows.items()}
    received = comm.exchange(sends, plan.send_counts, template=y)
    for peer, rows in plan.send_rows.items():
        x.index_add_(0, rows, received[peer])
    return x


@torch.library.custom_op("nvdd::all_reduce_sum", mutates_args=())
def all_reduce_sum(x: torch.Tensor, slot: int) -> torch.Tensor:
    """Sum over ranks of a per-rank partial."""
    return _binding(slot)[1].all_reduce(x, "sum")


def _check_rows(x: torch.Tensor, plan: HaloPlan) -> None:
    if x.dim() == 0 or x.shape[0] < plan.n_local:
        raise ValueError(
            f"halo exchange needs at least {plan.n_local} rows (owned + ghost), got "
            f"{tuple(x.shape)}"
        )


def _same_shape(x: torch.Tensor, slot: int) -> torch.Tensor:
    return torch.empty_like(x)


def _keep_slot(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.slot = inputs[1]


def _backward_by(adjoint: Any) -> Any:
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return adjoint(grad.contiguous(), ctx.slot), None

    return backward


for _op, _adjoint in (
    (copy_to_ghosts, sum_ghosts_into_owners),
    (sum_ghosts_into_owners, copy_to_ghosts),
    (all_reduce_sum, all_reduce_sum),
):
    _op.register_fake(_same_shape)
    _op.register_autograd(_backward_by(_adjoint), setup_context=_keep_slot)
