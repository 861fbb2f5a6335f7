"""Op interception: applies the spec while the unchanged model forward runs.

A `TorchFunctionMode` sits above autograd and sees every torch call of the forward:

* a scatter/index-add whose target is node-indexed (leading size == local rows) gets its
  ghost rows overwritten with their owners' rows, in place, through an autograd op whose
  backward sums ghost gradients back into the owners. Owned rows are already complete
  (every edge of an owned atom is local), so any number of message-passing layers is exact
  with a ghost shell of one cutoff;
* a node -> system reduction (target not node-indexed, source node-indexed) only sums the
  owned rows, so per-system outputs are this rank's partials;
* an op named in an `OpAdapter` gets its argument and output transforms.

With `check_indices` on (the first forward after each rebuild), indexing with the padding
sentinel raises a `DistributionRuleError` naming the rule instead of an opaque IndexError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from nvdd_plugins.distributed_model.context import HaloContext
from nvdd_plugins.distributed_model.transforms import apply_transform
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.spec import OpAdapter

__all__ = ["SENTINEL_RULE", "HaloInterceptionMode"]

SENTINEL_RULE = (
    "halo padding edges carry sentinel indices >= n_atoms; filter them in adapt_input: "
    "valid = (edge_index[0] < n) & (edge_index[1] < n)"
)

# scatter-like func -> (name of its source argument, the argument's position)
_SCATTERS: dict[Callable[..., Any], tuple[str, int]] = {}
for _name, _src in (
    ("scatter_add", "src"),
    ("index_add", "source"),
    ("scatter_reduce", "src"),
    ("index_reduce", "source"),
):
    for _func in (
        getattr(torch.Tensor, _name),
        getattr(torch.Tensor, _name + "_"),
        getattr(torch, _name),
    ):
        _SCATTERS[_func] = (_src, 3)
_INDEX_PUTS = (torch.Tensor.index_put_, torch.Tensor.index_put, torch.index_put)
_SUM_REDUCTIONS = (None, "sum")


def _get(args: Sequence[Any], kwargs: dict[str, Any], position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs.get(name)


def _set(args: list[Any], kwargs: dict[str, Any], position: int, name: str, value: Any) -> None:
    if len(args) > position:
        args[position] = value
    else:
        kwargs[name] = value


class HaloInterceptionMode(TorchFunctionMode):
    """Apply halo semantics to the torch calls of a model forward (see module docstring)."""

    def __init__(
        self, ctx: HaloContext, custom_ops: Sequence[OpAdapter], check_indices: bool = False
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.check_indices = check_indices
        self.adapters: dict[Any, OpAdapter] = {}
        for adapter in custom_ops:
            self.adapters[adapter.op] = adapter
            packet = getattr(adapter.op, "overloadpacket", None)
            if packet is not None:
                self.adapters.setdefault(packet, adapter)

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        adapter = self.adapters.get(func)
        if adapter is not None:
            return self._adapted(adapter, func, list(args), kwargs)
        if self.check_indices:
            self._check_sentinels(func, args, kwargs)
        if func in _SCATTERS:
            return self._scatter(func, list(args), kwargs)
        if func in _INDEX_PUTS:
            return self._index_put(func, list(args), kwargs)
        return func(*args, **kwargs)

    # -- scatters ---------------------------------------------------------------------------
    def _scatter(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        src_name, src_pos = _SCATTERS[func]
        target = _get(args, kwargs, 0, "input")
        dim = _get(args, kwargs, 1, "dim")
        src = _get(args, kwargs, src_pos, src_name)
        reduce = _get(args, kwargs, 4, "reduce")
        if not isinstance(target, torch.Tensor) or dim is None or dim % max(target.dim(), 1) != 0:
            return func(*args, **kwargs)
        if self.ctx.is_node_indexed(target):
            return self.ctx.refresh(func(*args, **kwargs))
        if self.ctx.is_node_indexed(src):
            if reduce not in _SUM_REDUCTIONS:
                raise DistributionRuleError(
                    f"a node -> system {func.__name__}(reduce={reduce!r}) cannot be "
                    "distributed by masking; only sums are. Declare an OpAdapter for it."
                )
            _set(args, kwargs, src_pos, src_name, self.ctx.mask_unowned(src))
        return func(*args, **kwargs)

    def _index_put(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        target = _get(args, kwargs, 0, "input")
        indices = _get(args, kwargs, 1, "indices")
        values = _get(args, kwargs, 2, "values")
        accumulate = bool(_get(args, kwargs, 3, "accumulate"))
        if not accumulate or not indices:
            return func(*args, **kwargs)
        if self.ctx.is_node_indexed(target):
            return self.ctx.refresh(func(*args, **kwargs))
        if self.ctx.is_node_indexed(values) and self.ctx.is_node_indexed(indices[0]):
            _set(args, kwargs, 2, "values", self.ctx.mask_unowned(values))
        return func(*args, **kwargs)

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
        for position, transform in adapter.output_transforms.items():
            if position >= len(outputs):
                raise DistributionRuleError(
                    f"OpAdapter for {func}: the op has no output {position}"
                )
            outputs[position] = apply_transform(transform, outputs[position], self.ctx)
        return type(result)(outputs) if isinstance(result, tuple | list) else outputs[0]

    # -- sentinel check ---------------------------------------------------------------------
    def _check_sentinels(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        source = args[0] if args else None
        if not self.ctx.is_node_indexed(source):
            return
        index = None
        if func is torch.Tensor.__getitem__ and len(args) > 1:
            key = args[1]
            index = key[0] if isinstance(key, tuple) and key else key
        elif func in (torch.Tensor.index_select, torch.index_select):
            if _get(args, kwargs, 1, "dim") % source.dim() == 0:
                index = _get(args, kwargs, 2, "index")
        elif func in _SCATTERS and _get(args, kwargs, 1, "dim") % source.dim() == 0:
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
