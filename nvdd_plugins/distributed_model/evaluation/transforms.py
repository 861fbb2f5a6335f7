"""How each spec transform is carried out in halo mode."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from nvdd_plugins.distributed_model.evaluation.context import HaloContext
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import (
    AllReduceSum,
    GatherInputs,
    ScatterOutputs,
    SliceOwned,
    Transform,
)

__all__ = ["apply_transform", "refresh_together"]


def _refresh(value: torch.Tensor, ctx: HaloContext) -> torch.Tensor:
    if value.dim() and value.shape[0] == 0 < ctx.n_rows:
        return value  # an output the op was asked to leave out has no rows to refresh
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


def refresh_together(
    transforms: Mapping[int, Transform], outputs: list[Any], ctx: HaloContext
) -> set[int]:
    """Refresh the ghost rows of an op's node-indexed `ScatterOutputs` outputs (`transforms`
    by output position) in one exchange when there are several of one dtype (their columns
    side by side), in place in `outputs`; the positions done (none otherwise)."""
    n = len(outputs)
    positions = [
        p
        for p, transform in transforms.items()
        if isinstance(transform, ScatterOutputs) and p < n and ctx.is_node_indexed(outputs[p])
    ]
    if len(positions) < 2 or len({outputs[p].dtype for p in positions}) > 1:
        return set()
    block = torch.cat([outputs[p].reshape(ctx.n_rows, -1) for p in positions], dim=1)
    widths = [math.prod(outputs[p].shape[1:]) for p in positions]
    for p, column in zip(positions, ctx.refresh(block).split(widths, dim=1), strict=True):
        outputs[p] = column.reshape(outputs[p].shape)
    return set(positions)
