"""Pairs within the cutoff at fixed shapes: the Verlet pairs beyond the cutoff left out of a
capacity fixed between rebuilds, so a captured step does the message-passing work of the
pairs that count (as an eager step, which filters them, does), not of every Verlet pair."""

from __future__ import annotations

import math

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.models import host_checks_allowed

__all__ = ["PairCapacity"]

_MARGIN = 1.05  # the pairs within the cutoff grow and shrink a little as atoms move
_EXTRA = 16


class PairCapacity:
    """How many pair slots a fixed-shape forward keeps, and whether they sufficed.

    Eager forwards (not captured) size the capacity from the pairs within the cutoff, with
    a margin; a captured forward keeps the first `capacity` of them (stable order) and
    sets `overflow` when more were within the cutoff, so the step is not kept and an eager
    one grows the capacity (`version` changes, and the step is captured again).
    """

    def __init__(self) -> None:
        self.capacity: int | None = None
        self.version = 0
        self.overflow: torch.Tensor | None = None

    def reset(self) -> None:
        """A new view: size the capacity again."""
        self.capacity = None
        self.overflow = None
        self.version += 1

    def within(self, batch: Batch, cutoff: float) -> Batch:
        """A copy of `batch` whose edges are its pairs closer than `cutoff` (Å), padded
        with pairs beyond it up to the capacity (the model weighs those zero)."""
        i, j = batch.edge_index
        x = batch.positions.detach()
        close = (x[j] - x[i] + batch.shifts.detach()).norm(dim=-1) < cutoff
        count = close.sum()
        if host_checks_allowed():
            needed = int(count)
            if self.capacity is None or needed > self.capacity:
                self.capacity = min(math.ceil(needed * _MARGIN) + _EXTRA, int(close.shape[0]))
                self.version += 1
        assert self.capacity is not None, "an eager forward sizes the capacity first"
        self.overflow = count > self.capacity
        slots = torch.argsort((~close).to(torch.int8), stable=True)[: self.capacity]
        return batch.select_edges(slots)
