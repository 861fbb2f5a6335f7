"""Counter-based Gaussian noise: a pure function of (seed, step, atom id, component).

The noise an atom gets never depends on which rank owns it or on the order of atoms, so a
stochastic integrator gives the same trajectory at any number of ranks.
"""

from __future__ import annotations

import math

import torch

__all__ = ["counter_normal"]

_MASK32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """(x * constant) mod 2^32 for 0 <= x < 2^32, without int64 overflow."""
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & _MASK32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (lowbias32) applied element-wise."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def counter_normal(
    seed: int, step: int | torch.Tensor, ids: torch.Tensor, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Standard normal numbers of shape (len(ids), 3) for the atoms with global `ids`; `step`
    may be a 0-d int64 tensor on their device (a captured step's count: no host copy)."""
    step = torch.as_tensor(step, device=ids.device)
    key = _hash32(step + ((seed * 0x9E3779B1) & _MASK32))
    counter = ids.long().unsqueeze(-1) * 3 + torch.arange(3, device=ids.device)
    base = _hash32(_hash32(counter ^ key) + step)
    u1 = (_hash32(base ^ 0x68E31DA4).to(dtype) + 0.5) / 2.0**32
    u2 = (_hash32(base ^ 0xB5297A4D).to(dtype) + 0.5) / 2.0**32
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
