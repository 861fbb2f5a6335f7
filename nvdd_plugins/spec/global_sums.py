"""Marks for a sum over every atom of a system inside a forward (a charge total, Ewald's
structure factors, a PME charge mesh): each rank sums the atoms it owns, then the partial
sums are added over the ranks.

Both marks are the identity in one process. In a distributed forward `GLOBAL_SUM_ADAPTERS`
(in the spec's `custom_ops`) turn `owned_part` into `SliceOwned` (the rank's owned rows,
so no atom is counted twice and ghost rows are left out) and `summed_over_ranks` into
`AllReduceSum` (whose backward sums the gradients over the ranks, so forces and stress
stay derivatives of the total energy).
"""

from __future__ import annotations

import torch
from torch.overrides import handle_torch_function, has_torch_function_unary

from nvdd_plugins.spec.adapters import OpAdapter
from nvdd_plugins.spec.transforms import AllReduceSum, SliceOwned

__all__ = ["GLOBAL_SUM_ADAPTERS", "owned_part", "summed_over_ranks"]


def owned_part(tensor: torch.Tensor) -> torch.Tensor:
    """Identity in one process. In a distributed forward adapted with `SliceOwned`
    (`GLOBAL_SUM_ADAPTERS`), the rows of the atoms this rank owns (a per-atom `tensor`)."""
    if has_torch_function_unary(tensor):  # dispatched to the active interception mode
        return handle_torch_function(owned_part, (tensor,), tensor)
    return tensor


def summed_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """Identity in one process. In a distributed forward adapted with `AllReduceSum`,
    `tensor` is this rank's partial of a per-system sum and the result is the sum over all
    ranks (the same on every rank)."""
    if has_torch_function_unary(tensor):  # dispatched to the active interception mode
        return handle_torch_function(summed_over_ranks, (tensor,), tensor)
    return tensor


GLOBAL_SUM_ADAPTERS: tuple[OpAdapter, ...] = (
    OpAdapter(op=owned_part, output_transforms={0: SliceOwned()}),
    OpAdapter(op=summed_over_ranks, output_transforms={0: AllReduceSum()}),
)
"""The adapters that distribute `owned_part` and `summed_over_ranks`."""
