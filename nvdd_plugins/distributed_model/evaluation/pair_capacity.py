"""Edge slots at fixed shapes: the slots a forward needs (the pairs onto owned rows, and
within the cutoff where the model prunes the Verlet skin) first, in a capacity that grows
when exceeded. A captured or compiled step then does the message-passing work of the pairs that
count (as an eager step, which filters them, does), and a compiled forward keeps one shape
across rebuilds."""

from __future__ import annotations

import math

import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.rows.view_build import slot_count
from nvdd_plugins.models import host_checks_allowed

__all__ = ["PairCapacity"]

_MARGIN = 1.05  # the pairs that count grow and shrink a little as atoms move and migrate
_EXTRA = 64


class PairCapacity:
    """How many edge slots a fixed-shape forward keeps, and whether they sufficed.

    Eager forwards (not captured) grow the capacity to the slots needed, with a margin (from
    nothing at each view but for compiled forwards, whose shape it keeps across views); a
    captured forward keeps the first `capacity` of them (stable order), filled up with
    slots that are not needed, and sets `overflow` when more were needed, so the step is
    not kept and an eager one grows the capacity (`version` changes, and the step is
    captured, or compiled, again).
    """

    def __init__(self) -> None:
        self.capacity: int | None = None
        self.version = 0
        self.overflow: torch.Tensor | None = None

    def reset(self, resize: bool) -> None:
        """A new view: nothing overflowed on it yet; `resize`: size the capacity again (a
        compiled forward keeps it, and with it its graph's shape)."""
        self.overflow = None
        if resize:
            self.capacity = None
            self.version += 1

    def kept(self, batch: Batch, needed: torch.Tensor) -> Batch:
        """A copy of `batch` whose edges are its slots where `needed` (E,) holds, then others
        up to the capacity (whose messages change nothing: beyond the model's cutoff, or
        onto ghost or padding rows, whose sums are replaced or never read)."""
        count = needed.sum()
        if host_checks_allowed():
            need = int(count)
            if self.capacity is None or need > self.capacity:
                self.capacity = math.ceil(need * _MARGIN) + _EXTRA
                self.version += 1
        assert self.capacity is not None, "an eager forward sizes the capacity first"
        self.overflow = count > self.capacity
        size = min(slot_count(self.capacity, batch.num_nodes), int(needed.shape[0]))
        slots = torch.argsort((~needed).to(torch.int8), stable=True)[:size]
        return batch.select_edges(slots)
