"""`scattered_onto_nodes`: declare, inside a forward, a node aggregation nvdd cannot see.

`OpAdapter` covers an opaque op whose every call aggregates. Some kernels aggregate in one
call and not in another (cuEquivariance's `uniform_1d` scatters only when given output
indices); the Python code around such a kernel knows which, and says so with this mark.

`owned_rows` goes one step further, for a model that knows where its per-atom work is: it
tells such a model which rows are owned, so per-atom work after an aggregation can skip the
ghost rows (MACE: its own LAMMPS code path, node features exchanged once per interaction).

Sums over the whole system have their own marks (`global_sums`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.overrides import TorchFunctionMode, handle_torch_function, has_torch_function_unary

__all__ = [
    "OwnedRows",
    "dispatched",
    "handling_marks",
    "owned_rows",
    "refreshing_marks",
    "scattered_onto_nodes",
]

# The ghost-row refresh of a distributed forward that runs without op interception.


@dataclass(frozen=True)
class OwnedRows:
    """The rows of a distributed forward that runs without op interception: the first
    `n_owned` of `n_rows` are this rank's atoms, the others ghosts (then padding).

    Attributes:
        n_owned: owned rows (first).
        n_rows: all rows.
        refresh: a copy of a node-indexed tensor whose ghost rows hold their owners' rows
            (differentiable: ghost gradients go to the owners).
        refresh_adjoint: a copy whose ghost rows are added into their owners' rows, then
            zeroed (the backward of `refresh`).
    """

    n_owned: int
    n_rows: int
    refresh: Callable[[torch.Tensor], torch.Tensor]
    refresh_adjoint: Callable[[torch.Tensor], torch.Tensor]


class _Marks(NamedTuple):
    refresh: Callable[[torch.Tensor], torch.Tensor]
    rows: OwnedRows | None


# How marked tensors are refreshed in a distributed forward without op interception: per
# thread (simulated ranks are threads), in a `threading.local`, whose read torch.compile
# traces and guards on (a `ContextVar.get` breaks the graph at every mark).
_state = threading.local()


def _marks() -> _Marks | None:
    return getattr(_state, "marks", None)


@contextmanager
def _marking(marks: _Marks | None) -> Iterator[None]:
    """Within (on this thread): `marks` are in force (nests; restored on exit)."""
    previous = _marks()
    _state.marks = marks
    try:
        yield
    finally:
        _state.marks = previous


def dispatched(mark: Callable[[torch.Tensor], torch.Tensor], tensor: torch.Tensor) -> Any:
    """`mark(tensor)` as the torch-function mode in force handles it (a distributed forward's
    interception), or None when no mode is in force: torch's own dispatch in eager code;
    while torch.compile traces, which hides a mode entered inside the traced code from
    `has_torch_function` (the mark would pass as the identity), a call of the mode
    `handling_marks` names."""
    if has_torch_function_unary(tensor):
        return handle_torch_function(mark, (tensor,), tensor)
    mode = getattr(_state, "mode", None)
    if mode is None or not torch.compiler.is_compiling():
        return None
    # inside its handler the mode is off, as torch's dispatch turns a mode off in its own
    # __torch_function__: the handler's own torch calls and its call of `mark` pass through
    with handling_marks(None), torch.overrides._pop_mode_temporarily():
        return mode.__torch_function__(mark, (type(tensor),), (tensor,), {})


@contextmanager
def handling_marks(mode: TorchFunctionMode | None) -> Iterator[None]:
    """Within (on this thread): `mode`, entered in the same block, handles the marks of
    code torch.compile traces (`dispatched`)."""
    previous = getattr(_state, "mode", None)
    _state.mode = mode
    try:
        yield
    finally:
        _state.mode = previous


def scattered_onto_nodes(tensor: torch.Tensor) -> torch.Tensor:
    """Identity in a single-process forward. In a distributed one, `tensor` (one row per
    local atom) is a sum over edges onto its rows, complete on owned rows: its ghost rows
    take their owners' rows, as `ScatterOutputs` does for an adapted op's output."""
    handled = dispatched(scattered_onto_nodes, tensor)  # by the interception mode
    if handled is not None:
        return handled
    marks = _marks()
    return tensor if marks is None else marks.refresh(tensor)


@contextmanager
def refreshing_marks(
    refresh: Callable[[torch.Tensor], torch.Tensor], rows: OwnedRows | None = None
) -> Iterator[None]:
    """Inside the block (this thread), marked tensors go through `refresh` (which leaves
    tensors that are not node-indexed as they are), and `owned_rows` yields `rows`."""
    with _marking(_Marks(refresh, rows)):
        yield


@contextmanager
def owned_rows() -> Iterator[OwnedRows | None]:
    """For a model that computes per-atom work on owned rows only and keeps the ghost rows
    it needs current itself (e.g. node features exchanged before each message pass with
    `rows.refresh`): the row layout of a distributed forward without op interception, and,
    inside the block, marks are not refreshed. None in any other forward (one process,
    under interception, or a mesh where some rank owns no atoms), where the model computes
    every row as usual."""
    marks = _marks()
    if marks is None or marks.rows is None:
        yield None
        return
    with _marking(None):
        yield marks.rows
