"""The halo exchange and the all-reduce as registered torch ops, for `torch.compile`.

A compiled forward must not capture plan or communicator objects (their identity would be
guarded and every rebuild would recompile), so the ops take an integer *slot*; the plan bound
to a slot is swapped at each rebuild. Each op has an explicit backward (the other op), so the
compiled graph stays whole around the exchange.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import torch

from nvdd_plugins.comm.base import Communicator
from nvdd_plugins.comm.halo_plan import HaloPlan
from nvdd_plugins.comm.primitives import add_ghosts_to_owners, fill_ghosts_

__all__ = ["bind_slot", "new_slot", "release_slot", "slot_binding"]

_BINDINGS: dict[int, tuple[HaloPlan, Communicator]] = {}
_COUNTER = itertools.count()
_LOCK = threading.Lock()


def new_slot() -> int:
    """A fresh slot number."""
    with _LOCK:
        return next(_COUNTER)


def bind_slot(slot: int, plan: HaloPlan, comm: Communicator) -> None:
    """Make `slot` refer to `plan` exchanged over `comm`."""
    _BINDINGS[slot] = (plan, comm)


def release_slot(slot: int) -> None:
    """Forget a slot (its plan and communicator can be freed)."""
    _BINDINGS.pop(slot, None)


def slot_binding(slot: int) -> tuple[HaloPlan, Communicator]:
    """The plan and communicator bound to `slot`."""
    try:
        return _BINDINGS[slot]
    except KeyError:
        raise RuntimeError(f"halo slot {slot} has no plan bound") from None


@torch.library.custom_op("nvdd::halo_forward", mutates_args=())
def _halo_forward(x: torch.Tensor, slot: int) -> torch.Tensor:
    plan, comm = slot_binding(slot)
    return fill_ghosts_(x.clone(), plan, comm)


@torch.library.custom_op("nvdd::halo_reverse", mutates_args=())
def _halo_reverse(x: torch.Tensor, slot: int) -> torch.Tensor:
    plan, comm = slot_binding(slot)
    return add_ghosts_to_owners(x, plan, comm)


@torch.library.custom_op("nvdd::all_reduce_sum", mutates_args=())
def _all_reduce_sum(x: torch.Tensor, slot: int) -> torch.Tensor:
    _, comm = slot_binding(slot)
    return comm.all_reduce(x, "sum")


def _same_shape(x: torch.Tensor, slot: int) -> torch.Tensor:
    return torch.empty_like(x)


def _keep_slot(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.slot = inputs[1]


def _backward_by(op_name: str) -> Any:
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return getattr(torch.ops.nvdd, op_name)(grad.contiguous(), ctx.slot), None

    return backward


for _op, _adjoint in (
    (_halo_forward, "halo_reverse"),
    (_halo_reverse, "halo_forward"),
    (_all_reduce_sum, "all_reduce_sum"),
):
    _op.register_fake(_same_shape)
    _op.register_autograd(_backward_by(_adjoint), setup_context=_keep_slot)
