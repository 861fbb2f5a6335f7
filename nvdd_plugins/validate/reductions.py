"""Reductions over the atom dimension of floating-point per-atom tensors (`x.sum(dim=0)`,
`x.max()`, `softmax(x, dim=0)`, ...). Under domain decomposition each rank reduces only its
own rows, owned and ghost, so such a reduction is rank-local unless the spec makes it
global. Integer and boolean reductions (species and index checks) are left out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["reduces_over_atoms"]

_DIM_SECOND = (
    "sum nansum mean nanmean prod amax amin max min logsumexp std var median nanmedian cumsum "
    "cumprod softmax log_softmax"
)
_DIM_POSITION = {**dict.fromkeys(_DIM_SECOND.split(), 1), "norm": 2}  # norm(input, p, dim)
_REDUCTIONS: dict[Any, int] = {
    getattr(owner, name): position
    for name, position in _DIM_POSITION.items()
    for owner in (torch, torch.Tensor, torch.nn.functional)
    if hasattr(owner, name)
}


def reduces_over_atoms(func: Any, args: Sequence[Any], kwargs: dict[str, Any], n_rows: int) -> bool:
    """Whether the call `func(*args, **kwargs)` reduces a floating-point per-atom tensor
    (leading size `n_rows`) over its atom dimension (dimension 0, or all dimensions)."""
    position = _REDUCTIONS.get(func)
    source = args[0] if args else kwargs.get("input")
    if position is None or not isinstance(source, torch.Tensor):
        return False
    if source.dim() == 0 or source.shape[0] != n_rows or not source.is_floating_point():
        return False
    dim = args[position] if len(args) > position else kwargs.get("dim", kwargs.get("axis"))
    if dim is None or isinstance(dim, bool):  # no dim (bool: std's legacy `unbiased`)
        return True
    if isinstance(dim, int):
        return dim % source.dim() == 0
    if isinstance(dim, Sequence) and not isinstance(dim, str):
        return any(isinstance(d, int) and d % source.dim() == 0 for d in dim)
    return False  # a tensor (elementwise max/min) or a named dimension
