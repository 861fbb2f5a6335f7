"""What a torch call does to per-atom (node-indexed) tensors: the one table of rules read by
the halo interception, which acts on each kind of call, and by the validator's recorder,
which reports how each call is handled. A new rule written here is seen by both.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from nvdd_plugins.spec import OpAdapter, scattered_onto_nodes

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "CallKind",
    "CallRules",
    "StaleTargets",
    "aggregation_mode",
    "get_arg",
    "has_rows",
    "is_opaque",
    "set_arg",
]

_TRANSPARENT_NAMESPACES = frozenset({"aten", "prims", "nvdd"})


class CallKind(StrEnum):
    """The kinds of calls the rules tell apart."""

    MARKED = "marked"  # scattered_onto_nodes: its argument's ghost rows are refreshed
    ADAPTED = "adapted"  # an OpAdapter of the spec covers the op
    OPAQUE = "opaque"  # a torch.ops op outside aten, prims and nvdd: not seen into
    INTO_NODES = "into_nodes"  # an aggregation along the rows of a node-indexed tensor
    NODE_TO_SYSTEM = "node_to_system"  # an aggregation of node-indexed values onto others
    OTHER = "other"  # anything else: per row, a gather, not about atoms


@dataclass(frozen=True)
class Aggregation:
    """How one aggregation call is read: (position, keyword) of the written values; whether
    it writes into its first argument; its functional twin; its kind: "sum" (node -> system
    masking applies), "write" (index_copy, scatter, index_put without accumulate) or
    "reduce" (scatter_reduce, index_reduce: the mode is the `reduce` argument)."""

    source: tuple[int, str]
    in_place: bool
    out_of_place: Callable[..., Any]
    kind: str


def _aggregations() -> dict[Callable[..., Any], Aggregation]:
    table: dict[Callable[..., Any], Aggregation] = {}
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
        table[twin] = Aggregation(written, False, twin, kind)
        table[getattr(torch.Tensor, name + "_")] = Aggregation(written, True, twin, kind)
        if hasattr(torch, name):
            table[getattr(torch, name)] = Aggregation(written, False, twin, kind)
    return table


AGGREGATIONS = _aggregations()
"""Every aggregation the rules know, by torch callable."""

# calls whose argument 2 indexes the rows of argument 0 along `dim` (argument 1)
_INDEXED_BY_ARG_2 = frozenset(
    [torch.Tensor.index_select, torch.index_select]
    + [f for f, agg in AGGREGATIONS.items() if agg.source[0] == 3]
)


def is_opaque(func: Any) -> bool:
    """Whether `func` is an op the interception cannot see into: a `torch.ops` op outside
    the aten, prims and nvdd namespaces (a custom kernel)."""
    if not isinstance(func, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return False
    packet = getattr(func, "overloadpacket", func)
    return packet._qualified_op_name.partition("::")[0] not in _TRANSPARENT_NAMESPACES


def has_rows(value: object, n_rows: int) -> bool:
    """Whether `value` is a tensor with one row per local atom (leading size `n_rows`)."""
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == n_rows


def get_arg(args: Sequence[Any], kwargs: dict[str, Any], position: int, name: str) -> Any:
    """Argument `position` of a call, or its keyword `name`."""
    return args[position] if len(args) > position else kwargs.get(name)


def set_arg(args: list[Any], kwargs: dict[str, Any], position: int, name: str, value: Any) -> None:
    """Replace argument `position` (or keyword `name`) of a call by `value`."""
    if len(args) > position:
        args[position] = value
    else:
        kwargs[name] = value


def aggregation_mode(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """ "sum", "write" or the reduce mode of one aggregation call."""
    agg = AGGREGATIONS[func]
    if func in (torch.Tensor.index_put, torch.Tensor.index_put_, torch.index_put):
        return "sum" if get_arg(args, kwargs, 3, "accumulate") else "write"
    reduce = kwargs.get("reduce")
    if agg.kind == "reduce":
        reduce = get_arg(args, kwargs, 4, "reduce")
    if reduce is None:
        return "write" if agg.kind == "write" else "sum"
    return str(reduce)


class CallRules:
    """The rules for one layout: which tensors are node-indexed, and the spec's adapters.

    Args:
        node_indexed: whether a value has one row per local atom.
        custom_ops: the spec's op adapters (an overload's adapter also covers its packet).
    """

    def __init__(
        self, node_indexed: Callable[[object], bool], custom_ops: Sequence[OpAdapter]
    ) -> None:
        self.node_indexed = node_indexed
        ops = [(adapter.resolved_op(), adapter) for adapter in custom_ops]
        self.adapters: dict[Any, OpAdapter] = dict(ops)
        for op, adapter in ops:
            if hasattr(op, "overloadpacket"):
                self.adapters.setdefault(op.overloadpacket, adapter)

    def classify(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> CallKind:
        """The kind of the call `func(*args, **kwargs)`."""
        if func is scattered_onto_nodes:
            return CallKind.MARKED
        if func in self.adapters:
            return CallKind.ADAPTED
        if is_opaque(func):
            return CallKind.OPAQUE
        agg = AGGREGATIONS.get(func)
        return CallKind.OTHER if agg is None else self._aggregation_kind(agg, args, kwargs)

    def _aggregation_kind(
        self, agg: Aggregation, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> CallKind:
        target = get_arg(args, kwargs, 0, "input")
        if not isinstance(target, torch.Tensor) or target.dim() == 0:
            return CallKind.OTHER
        is_put = agg.source[0] == 2
        dim = 0 if is_put else get_arg(args, kwargs, 1, "dim")
        if dim is None or dim % target.dim() != 0:
            return CallKind.OTHER
        if self.node_indexed(target):
            return CallKind.INTO_NODES
        source = get_arg(args, kwargs, *agg.source)
        if is_put:
            indices = get_arg(args, kwargs, 1, "indices") or (None,)
            source = source if self.node_indexed(indices[0]) else None
        return CallKind.NODE_TO_SYSTEM if self.node_indexed(source) else CallKind.OTHER

    def row_index(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """The index a call uses into the rows of a node-indexed tensor (the first key of
        `x[...]`, the `index` of index_select and of scatters along dim 0), or None."""
        source = args[0] if args else None
        if not self.node_indexed(source):
            return None
        if func is torch.Tensor.__getitem__ and len(args) > 1:
            key = args[1]
            return key[0] if isinstance(key, tuple) and key else key
        if func in _INDEXED_BY_ARG_2 and get_arg(args, kwargs, 1, "dim") % source.dim() == 0:
            return get_arg(args, kwargs, 2, "index")
        return None


class StaleTargets:
    """The targets of in-place aggregations whose refreshed result is a new tensor (compile
    semantics), each with a note saying where it came from: reading one later reads values
    without their halo refresh."""

    def __init__(self) -> None:
        self._targets: dict[int, tuple[weakref.ref[torch.Tensor], Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._targets)

    def track(self, func: Any, args: Sequence[Any], result: Any, note: Any) -> None:
        """Note the target of the call `func(*args) -> result` when it is an in-place
        aggregation that returned another tensor."""
        agg = AGGREGATIONS.get(func)
        target = args[0] if args else None
        if agg and agg.in_place and isinstance(target, torch.Tensor) and result is not target:
            self._targets[id(target)] = (weakref.ref(target), note)

    def find(self, values: Any) -> Any:
        """The note of the first stale tensor among `values` (any nesting), or None."""
        for leaf in tree_leaves(values):
            entry = self._targets.get(id(leaf))
            if entry is not None and entry[0]() is leaf:
                return entry[1]
        return None
