"""Op interception: applies the spec while the unchanged model forward runs.

`HaloInterceptionMode`, a `TorchFunctionMode` above autograd, refreshes the ghost rows after
every aggregation onto atoms, keeps the owned rows of node -> system sums, applies the spec's
`OpAdapter`s, reports opaque ops, and on a first forward after a rebuild checks sentinel
indices and stale tensors (docs/architecture.md, "The halo refresh").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from nvdd_plugins.distributed_model.evaluation.call_rules import (
    AGGREGATIONS,
    Aggregation,
    CallKind,
    CallRules,
    StaleTargets,
    aggregation_mode,
    get_arg,
    set_arg,
)
from nvdd_plugins.distributed_model.evaluation.context import HaloContext
from nvdd_plugins.distributed_model.evaluation.transforms import apply_transform, refresh_together
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import OpAdapter

__all__ = ["REBIND_RULE", "SENTINEL_RULE", "HaloInterceptionMode"]

logger = logging.getLogger(__name__)

SENTINEL_RULE = (
    "halo padding edges carry sentinel indices >= n_atoms; filter them in adapt_input: "
    "valid = (edge_index[0] < n) & (edge_index[1] < n)"
)
REBIND_RULE = (
    "with compile=True the halo refresh of an in-place aggregation returns a new tensor: "
    "rebind the result (x = x.index_add_(0, i, m)) and do not read x's old value afterwards"
)
_REPORTED: set[Any] = set()  # opaque ops already reported (once per process)


class HaloInterceptionMode(TorchFunctionMode):
    """Apply halo semantics to the torch calls of a model forward (see module docstring).

    Args:
        ctx: the local layout and the halo slot.
        custom_ops: the spec's op adapters.
        check_indices: also run the checks of a first forward after a rebuild.
        strict: raise instead of warning on an opaque op that no adapter covers.
    """

    def __init__(
        self,
        ctx: HaloContext,
        custom_ops: Sequence[OpAdapter],
        check_indices: bool = False,
        strict: bool = False,
    ) -> None:
        super().__init__()
        self.ctx, self.check_indices, self.strict = ctx, check_indices, strict
        self.rules = CallRules(ctx.is_node_indexed, custom_ops)
        self._stale = StaleTargets()

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        kind = self.rules.classify(func, args, kwargs)
        if kind is CallKind.MARKED:
            return self.ctx.refresh_rows(args[0])
        if kind is CallKind.ADAPTED:
            return self._adapted(self.rules.adapters[func], func, list(args), kwargs)
        if self.check_indices:
            self._check_stale(func, args, kwargs)
            self._check_sentinels(func, args, kwargs)
        if kind is CallKind.OPAQUE:
            result = func(*args, **kwargs)
            self._check_opaque(func, (args, kwargs), result)
            return result
        if kind is CallKind.INTO_NODES:
            return self._into_nodes(func, AGGREGATIONS[func], list(args), kwargs)
        if kind is CallKind.NODE_TO_SYSTEM:
            return self._onto_system(func, AGGREGATIONS[func], list(args), kwargs)
        return func(*args, **kwargs)

    # -- aggregations -----------------------------------------------------------------------
    def _onto_system(
        self, func: Any, agg: Aggregation, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        """A node -> system sum keeps the owned rows only."""
        reduction = aggregation_mode(func, args, kwargs)
        if reduction != "sum":
            raise DistributionRuleError(
                f"a node -> system {func.__name__} ({reduction}) cannot be distributed "
                "by dropping ghost rows; only sums can. Declare an OpAdapter for it."
            )
        set_arg(
            args, kwargs, *agg.source, self.ctx.mask_unowned(get_arg(args, kwargs, *agg.source))
        )
        return func(*args, **kwargs)

    def _into_nodes(
        self, func: Any, agg: Aggregation, args: list[Any], kwargs: dict[str, Any]
    ) -> torch.Tensor:
        """Run an aggregation onto node rows and refresh the ghost rows of its result."""
        if not agg.in_place:
            return self.ctx.refresh(func(*args, **kwargs))
        target = args[0]
        if (agg.kind == "reduce" or "reduce" in kwargs) and self.ctx.in_place:
            # Autograd keeps the input and result of a scatter_reduce_/index_reduce_, so
            # neither may be refreshed in place: reduce into a copy, refresh that, copy back.
            result = self.ctx.refresh(agg.out_of_place(target.clone(), *args[1:], **kwargs))
            return target.copy_(result)
        result = self.ctx.refresh_(func(*args, **kwargs))
        if self.check_indices:
            self._stale.track(func, args, result, func.__name__)
        return result

    # -- adapters ---------------------------------------------------------------------------
    def _adapted(
        self, adapter: OpAdapter, func: Any, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        for position, transform in adapter.arg_transforms.items():
            if position >= len(args):
                raise DistributionRuleError(
                    f"OpAdapter for {func}: argument {position} must be passed positionally"
                )
            args[position] = apply_transform(transform, args[position], self.ctx)
        result = func(*args, **kwargs)
        if not adapter.output_transforms:
            return result
        outputs = list(result) if isinstance(result, tuple | list) else [result]
        done = refresh_together(adapter.output_transforms, outputs, self.ctx)
        for position, transform in adapter.output_transforms.items():
            if position in done:
                continue
            if position >= len(outputs):
                raise DistributionRuleError(
                    f"OpAdapter for {func}: the op has no output {position}"
                )
            outputs[position] = apply_transform(transform, outputs[position], self.ctx)
        return type(result)(outputs) if isinstance(result, tuple | list) else outputs[0]

    def _check_opaque(self, func: Any, inputs: Any, result: Any) -> None:
        """Report an opaque op that reads or writes node-indexed tensors and no adapter
        covers (a fused scatter of per-edge messages only writes them)."""
        packet = getattr(func, "overloadpacket", func)
        if packet in _REPORTED and not self.strict:
            return
        reads = any(self.ctx.is_node_indexed(leaf) for leaf in tree_leaves(inputs))
        outputs = list(result) if isinstance(result, tuple | list) else [result]
        written = [k for k, out in enumerate(outputs) if self.ctx.is_node_indexed(out)]
        if not (reads or written):
            return
        does = "reads and writes" if reads and written else "reads" if reads else "writes"
        name = f"torch.ops.{packet._qualified_op_name.replace('::', '.')}"
        overload = f"{name}.{getattr(func, '_overloadname', 'default')}"
        scatter = ", ".join(f"{k}: ScatterOutputs()" for k in written or [0])
        message = (
            f"the opaque op {name} {does} per-atom tensors and no OpAdapter in the spec "
            "covers it, so nvdd cannot see whether it aggregates over edges. If it does, its "
            f"ghost rows are wrong: add OpAdapter(op={overload}, output_transforms={{{scatter}}}) "
            f"to the spec's custom_ops; if it is per-atom, add OpAdapter(op={overload}) to say so"
        )
        if self.strict:
            raise DistributionRuleError(message)
        _REPORTED.add(packet)
        logger.warning(message)

    # -- first-forward checks ---------------------------------------------------------------
    def _check_stale(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        if self._stale and self._stale.find((args, kwargs)) is not None:
            raise DistributionRuleError(f"{func.__name__} reads a stale tensor: {REBIND_RULE}")

    def is_stale(self, tensor: object) -> bool:
        """Whether `tensor` is the un-refreshed target of an in-place aggregation."""
        return self._stale.find(tensor) is not None

    def _check_sentinels(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        index = self.rules.row_index(func, args, kwargs)
        if (
            not isinstance(index, torch.Tensor)
            or index.is_floating_point()
            or index.dtype == torch.bool
            or not index.numel()
        ):
            return
        largest = int(_distinct_entries(index).max())
        if largest >= self.ctx.n_rows:
            raise DistributionRuleError(f"index {largest} is out of range: {SENTINEL_RULE}")


def _distinct_entries(index: torch.Tensor) -> torch.Tensor:
    """`index` without its broadcast dimensions (stride 0: one value repeated), so that a
    reduction over it does not materialise the expansion (an edge index expanded over a
    message's features is as large as the message)."""
    for dim, (size, stride) in enumerate(zip(index.shape, index.stride(), strict=True)):
        if stride == 0 and size > 1:
            index = index.narrow(dim, 0, 1)
    return index
