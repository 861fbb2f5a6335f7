"""`MeshSums`: the `SumReducer` `DomainParallel` gives its integrator."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from nvdd_plugins.comm import Communicator

__all__ = ["MeshSums"]


class MeshSums:
    """Sum an integrator's named partials over every rank with one all-reduce: the partials
    are packed into one float64 vector, reduced, and unpacked (each back to its shape and
    dtype). The result is identical on every rank.

    Args:
        comm: the mesh's communicator.
    """

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self.reductions = 0  # all-reduces issued so far

    def __call__(self, partials: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The global sum of each named partial."""
        values = [torch.as_tensor(value).detach() for value in partials.values()]
        if not values:
            return {}
        packed = torch.cat([v.reshape(-1).to(values[0].device, torch.float64) for v in values])
        total = self.comm.all_reduce(packed, "sum")
        self.reductions += 1
        out, start = {}, 0
        for name, value in zip(partials, values, strict=True):
            size = value.numel()
            out[name] = total[start : start + size].reshape(value.shape).to(value)
            start += size
        return out
