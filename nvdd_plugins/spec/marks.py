"""`scattered_onto_nodes`: declare, inside a forward, a node aggregation nvdd cannot see.

`OpAdapter` covers an opaque op whose every call aggregates. Some kernels aggregate in one
call and not in another (cuEquivariance's `uniform_1d` scatters only when given output
indices); the Python code around such a kernel knows which, and says so with this mark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.overrides import handle_torch_function, has_torch_function_unary

__all__ = ["refreshing_marks", "scattered_onto_nodes"]

# The ghost-row refresh of a distributed forward that runs without op interception.
_REFRESH: ContextVar[Callable[[torch.Tensor], torch.Tensor] | None] = ContextVar(
    "nvdd_refresh", default=None
)


def scattered_onto_nodes(tensor: torch.Tensor) -> torch.Tensor:
    """Identity in a single-process forward. In a distributed one, `tensor` (one row per
    local atom) is a sum over edges onto its rows, complete on owned rows: its ghost rows
    take their owners' rows, as `ScatterOutputs` does for an adapted op's output."""
    if has_torch_function_unary(tensor):  # dispatched to the active interception mode
        return handle_torch_function(scattered_onto_nodes, (tensor,), tensor)
    refresh = _REFRESH.get()
    return tensor if refresh is None else refresh(tensor)


@contextmanager
def refreshing_marks(refresh: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Inside the block (this thread), marked tensors go through `refresh` (which leaves
    tensors that are not node-indexed as they are)."""
    token = _REFRESH.set(refresh)
    try:
        yield
    finally:
        _REFRESH.reset(token)
