"""How each spec transform is carried out in halo mode."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvdd_plugins.distributed_model.context import HaloContext
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import (
    AllReduceSum,
    GatherInputs,
    ScatterOutputs,
    SliceOwned,
    Transform,
)

__all__ = ["apply_transform"]


def _refresh(value: torch.Tensor, ctx: HaloContext) -> torch.Tensor:
    if not ctx.is_node_indexed(value):
        raise DistributionRuleError(
            f"ScatterOutputs/GatherInputs apply to node-indexed tensors ({ctx.n_rows} rows); "
            f"got shape {tuple(value.shape)}"
        )
    return ctx.refresh(value)


_EXECUTORS: dict[type[Transform], Callable[[torch.Tensor, HaloContext], torch.Tensor]] = {
    ScatterOutputs: _refresh,
    GatherInputs: _refresh,
    SliceOwned: lambda value, ctx: value[: ctx.n_owned],
    AllReduceSum: lambda value, ctx: ctx.all_reduce(value),
}


def apply_transform(transform: Transform, value: object, ctx: HaloContext) -> object:
    """Apply `transform` to one op argument or output (non-tensors pass through)."""
    if not isinstance(value, torch.Tensor):
        return value
    return _EXECUTORS[type(transform)](value, ctx)
