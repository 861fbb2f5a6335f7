"""Op interception: applies the spec while the unchanged model forward runs.

`HaloInterceptionMode`, a `TorchFunctionMode` above autograd, refreshes the ghost rows after
every aggregation onto atoms, keeps the owned rows of node -> system sums, applies the spec's
`OpAdapter`s, reports opaque ops, and on a first forward after a rebuild checks sentinel
indices and stale tensors (docs/architecture.md, "The halo refresh").
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from nvdd_plugins.distributed_model.context import HaloContext
from nvdd_plugins.distributed_model.transforms import apply_transform, refresh_together
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import OpAdapter, scattered_onto_nodes

__all__ = ["REBIND_RULE", "SENTINEL_RULE", "HaloInterceptionMode", "is_aggregation", "is_opaque"]

logger = logging.getLogger(__name__)

SENTINEL_RULE = (
    "halo padding edges carry sentinel indices >= n_atoms; filter them in adapt_input: "
    "valid = (edge_index[0] < n) & (edge_index[1] < n)"
)
REBIND_RULE = (
    "with compile=True the halo refresh of an in-place aggregation returns a new tensor: "
    "rebind the result (x = x.index_add_(0, i, m)) and do not read x's old value afterwards"
)
_TRANSPARENT_NAMESPACES = frozenset({"aten", "prims", "nvdd"})
_REPORTED: set[Any] = set()  # opaque ops already reported (once per process)


@dataclass(frozen=True)
class _Aggregation:
    """How one aggregation call is read: (position, keyword) of the written values; whether
    it writes into its first argument; its functional twin; its kind: "sum" (node -> system
    masking applies), "write" (index_copy, scatter, index_put without accumulate) or
    "reduce" (scatter_reduce, index_reduce: the mode is the `reduce` argument)."""

    source: tuple[int, str]
    in_place: bool
    out_of_place: Callable[..., Any]
    kind: str


def _aggregations() -> dict[Callable[..., Any], _Aggregation]:
    table: dict[Callable[..., Any], _Aggregation] = {}
    for name, source, kind in (
        ("scatter_add", "src", "sum"),
        ("index_add", "source", "sum"),
        ("scatter_reduce", "src", "reduce"),
        ("index_reduce", "source", "reduce"),
        ("index_copy", "source", "write"),
        ("scatter", "src", "write"),
        ("index_put", "values", "write"),
    ):
        twin, written = getattr(torch.Tensor, name), (2 if name == "index_put" else 3, source)
        table[twin] = _Aggregation(written, False, twin, kind)
        table[getattr(torch.Tensor, name + "_")] = _Aggregation(written, True, twin, kind)
        if hasattr(torch, name):
            table[getattr(torch, name)] = _Aggregation(written, False, twin, kind)
    return table


_AGGREGATIONS = _aggregations()


def is_aggregation(func: Any) -> bool:
    """Whether the interception treats calls of `func` as aggregations (scatter, index_add,
    index_copy, index_reduce, index_put, ...; their in-place forms end in "_")."""
    return func in _AGGREGATIONS


def is_opaque(func: Any) -> bool:
    """Whether `func` is an op the interception cannot see into: a `torch.ops` op outside
    the aten, prims and nvdd namespaces (a custom kernel)."""
    if not isinstance(func, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return False
    packet = getattr(func, "overloadpacket", func)
    return packet._qualified_op_name.partition("::")[0] not in _TRANSPARENT_NAMESPACES


# calls whose argument 2 indexes the rows of argument 0 along `dim` (argument 1)
_INDEXED_BY_ARG_2 = frozenset(
    [torch.Tensor.index_select, torch.index_select]
    + [f for f, agg in _AGGREGATIONS.items() if agg.source[0] == 3]
)


def _get(args: Sequence[Any], kwargs: dict[str, Any], position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs.get(name)


def _set(args: list[Any], kwargs: dict[str, Any], position: int, name: str, value: Any) -> None:
    if len(args) > position:
        args[position] = value
    else:
        kwargs[name] = value


def _reduction(func: Any, args: Sequence[Any], kwargs: dict[str, Any], agg: _Aggregation) -> str:
    """ "sum", "write" or the reduce mode of one call."""
    if func in (torch.Tensor.index_put, torch.Tensor.index_put_, torch.index_put):
        return "sum" if _get(args, kwargs, 3, "accumulate") else "write"
    reduce = kwargs.get("reduce")
    if agg.kind == "reduce":
        reduce = _get(args, kwargs, 4, "reduce")
    if reduce is None:
        return "write" if agg.kind == "write" else "sum"
    return str(reduce)


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
        ops = [(adapter.resolved_op(), adapter) for adapter in custom_ops]
        self.adapters: dict[Any, OpAdapter] = dict(ops)
        for op, adapter in ops:  # an overload's adapter also covers its packet
            if hasattr(op, "overloadpacket"):
                self.adapters.setdefault(op.overloadpacket, adapter)
        self._stale: dict[int, weakref.ref[torch.Tensor]] = {}

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func is scattered_onto_nodes:
            return self.ctx.refresh_rows(args[0])
        adapter = self.adapters.get(func)
        if adapter is not None:
            return self._adapted(adapter, func, list(args), kwargs)
        if self.check_indices:
            self._check_stale(func, args, kwargs)
            self._check_sentinels(func, args, kwargs)
        if is_opaque(func):
            result = func(*args, **kwargs)
            self._check_opaque(func, (args, kwargs), result)
            return result
        agg = _AGGREGATIONS.get(func)
        if agg is not None:
            return self._aggregate(func, agg, list(args), kwargs)
        return func(*args, **kwargs)

    # -- aggregations -----------------------------------------------------------------------
    def _aggregate(
        self, func: Any, agg: _Aggregation, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        target = _get(args, kwargs, 0, "input")
        if not isinstance(target, torch.Tensor) or target.dim() == 0:
            return func(*args, **kwargs)
        is_put = agg.source[0] == 2
        dim = 0 if is_put else _get(args, kwargs, 1, "dim")
        if dim is None or dim % target.dim() != 0:
            return func(*args, **kwargs)
        if self.ctx.is_node_indexed(target):
            return self._into_nodes(func, agg, args, kwargs)
        source = _get(args, kwargs, *agg.source)
        if is_put:
            indices = _get(args, kwargs, 1, "indices") or (None,)
            source = source if self.ctx.is_node_indexed(indices[0]) else None
        if self.ctx.is_node_indexed(source):
            reduction = _reduction(func, args, kwargs, agg)
            if reduction != "sum":
                raise DistributionRuleError(
                    f"a node -> system {func.__name__} ({reduction}) cannot be distributed "
                    "by dropping ghost rows; only sums can. Declare an OpAdapter for it."
                )
            _set(args, kwargs, *agg.source, self.ctx.mask_unowned(source))
        return func(*args, **kwargs)

    def _into_nodes(
        self, func: Any, agg: _Aggregation, args: list[Any], kwargs: dict[str, Any]
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
        if result is not target and self.check_indices:
            self._stale[id(target)] = weakref.ref(target)
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
        if self._stale and any(self.is_stale(leaf) for leaf in tree_leaves((args, kwargs))):
            raise DistributionRuleError(f"{func.__name__} reads a stale tensor: {REBIND_RULE}")

    def is_stale(self, tensor: object) -> bool:
        """Whether `tensor` is the un-refreshed target of an in-place aggregation."""
        ref = self._stale.get(id(tensor))
        return ref is not None and ref() is tensor

    def _check_sentinels(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        source = args[0] if args else None
        if not self.ctx.is_node_indexed(source):
            return
        index = None
        if func is torch.Tensor.__getitem__ and len(args) > 1:
            key = args[1]
            index = key[0] if isinstance(key, tuple) and key else key
        elif func in _INDEXED_BY_ARG_2 and _get(args, kwargs, 1, "dim") % source.dim() == 0:
            index = _get(args, kwargs, 2, "index")
        if (
            isinstance(index, torch.Tensor)
            and not index.is_floating_point()
            and index.dtype != torch.bool
            and index.numel()
            and int(index.max()) >= self.ctx.n_rows
        ):
            raise DistributionRuleError(
                f"index {int(index.max())} is out of range: {SENTINEL_RULE}"
            )
