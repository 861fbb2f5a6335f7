"""The halo exchange and the all-reduce as differentiable operations, eager and compiled alike.

`copy_to_ghosts` overwrites ghost rows with their owners' rows; its adjoint,
`sum_ghosts_into_owners`, adds ghost rows into their owners' rows and zeroes them. Each is
the other's backward, so gradients that reach ghost rows flow back to the ranks that own the
atoms; `all_reduce_sum` is its own adjoint.

Each operation is defined once, in `_OPERATIONS`: its kernel (no autograd) and the operation
its backward applies. Two ways in run that one table:
  - eager calls: an `autograd.Function` that calls the kernel directly (a registered op's
    dispatch would cost ~20 us a call, several percent of a small CPU step);
  - compiled code (`torch.compiler.is_compiling()`): registered ops `nvdd::<name>` with
    `register_autograd`, so the compiled graph stays whole around the exchange.

The operations take an integer slot, not the plan and communicator: a compiled forward would
guard on those objects' identity and recompile at every rebuild, whereas a `HaloSlot` keeps
its number while it is bound to each new plan.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from nvdd_plugins.comm.base import Communicator
from nvdd_plugins.comm.halo_plan import HaloPlan

__all__ = [
    "HaloSlot",
    "all_reduce_sum",
    "copy_to_ghosts",
    "copy_to_ghosts_",
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


# -- kernels: no autograd; each may overwrite its input and returns the result --------------
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


def _add_ghosts_to_owners_(y: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """Add the ghost rows of `y` into their owners' rows, then zero them; in place."""
    _check_rows(y, plan)
    images = y.index_select(0, plan.self_dst) if plan.self_dst.numel() else None
    sends = {p: y.index_select(0, rows) for p, rows in plan.recv_rows.items()}
    y[plan.n_owned : plan.n_local].zero_()  # a fill: `= 0` copies a host scalar in
    if images is not None:
        y.index_add_(0, plan.self_src, images)
    received = comm.exchange(sends, plan.send_counts, template=y)
    for peer, rows in plan.send_rows.items():
        y.index_add_(0, rows, received[peer])
    return y


def _reduce_sum(x: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    return comm.all_reduce(x, "sum")


def _check_rows(x: torch.Tensor, plan: HaloPlan) -> None:
    if x.dim() == 0 or x.shape[0] < plan.n_local:
        raise ValueError(
            f"halo exchange needs at least {plan.n_local} rows (owned + ghost), got "
            f"{tuple(x.shape)}"
        )


class _Operation(NamedTuple):
    kernel: Callable[[torch.Tensor, HaloPlan, Communicator], torch.Tensor]
    adjoint: str  # the operation the backward applies to the incoming gradient


_OPERATIONS: dict[str, _Operation] = {
    "copy_to_ghosts": _Operation(fill_ghosts_, "sum_ghosts_into_owners"),
    "sum_ghosts_into_owners": _Operation(_add_ghosts_to_owners_, "copy_to_ghosts"),
    "all_reduce_sum": _Operation(_reduce_sum, "all_reduce_sum"),
}


# -- eager: the kernel called directly --------------------------------------------------------
class _Eager(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, name: str, plan: HaloPlan, comm: Communicator, in_place: bool
    ) -> torch.Tensor:
        ctx.name, ctx.plan, ctx.comm = name, plan, comm
        if in_place:
            ctx.mark_dirty(x)
            return _OPERATIONS[name].kernel(x, plan, comm)
        return _OPERATIONS[name].kernel(x.clone(), plan, comm)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        adjoint = _OPERATIONS[ctx.name].adjoint
        result = _Eager.apply(grad.contiguous(), adjoint, ctx.plan, ctx.comm, False)
        return result, None, None, None, None


# -- compiled: registered ops over slots --------------------------------------------------------
def _register(name: str) -> Any:
    def run(x: torch.Tensor, slot: int) -> torch.Tensor:
        plan, comm = _binding(slot)
        return _OPERATIONS[name].kernel(x.clone(), plan, comm)

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _REGISTERED[_OPERATIONS[name].adjoint](grad.contiguous(), ctx.slot), None

    op = torch.library.custom_op(f"nvdd::{name}", run, mutates_args=())
    op.register_fake(_same_shape)
    op.register_autograd(backward, setup_context=_keep_slot)
    return op


def _same_shape(x: torch.Tensor, slot: int) -> torch.Tensor:
    return torch.empty_like(x)


def _keep_slot(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.slot = inputs[1]


_REGISTERED: dict[str, Any] = {name: _register(name) for name in _OPERATIONS}


def _apply(name: str, x: torch.Tensor, slot: int, in_place: bool = False) -> torch.Tensor:
    if torch.compiler.is_compiling():
        result = _REGISTERED[name](x, slot)
        return x.copy_(result) if in_place else result
    plan, comm = _binding(slot)
    return _Eager.apply(x, name, plan, comm, in_place)


# -- the operations ------------------------------------------------------------------------------
def copy_to_ghosts(x: torch.Tensor, slot: int) -> torch.Tensor:
    """A copy of `x` whose ghost rows hold their owners' rows (first dim = rows)."""
    return _apply("copy_to_ghosts", x, slot)


def copy_to_ghosts_(x: torch.Tensor, slot: int) -> torch.Tensor:
    """`copy_to_ghosts` into `x` itself; returns `x` (only for tensors autograd has not
    saved, such as a freshly computed scatter result)."""
    return _apply("copy_to_ghosts", x, slot, in_place=True)


def sum_ghosts_into_owners(y: torch.Tensor, slot: int) -> torch.Tensor:
    """A copy of `y` with its ghost rows added into their owners' rows, then zeroed."""
    return _apply("sum_ghosts_into_owners", y, slot)


def all_reduce_sum(x: torch.Tensor, slot: int) -> torch.Tensor:
    """Sum over ranks of a per-rank partial."""
    return _apply("all_reduce_sum", x, slot)
