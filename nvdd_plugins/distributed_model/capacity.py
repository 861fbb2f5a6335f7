"""Padded per-rank capacities: node rows and edge slots that grow rarely."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Capacity"]


@dataclass
class Capacity:
    """Capacity that only grows: to `need` when exact, else by `growth` with some slack.

    Exact capacities keep eager runs as cheap as possible; growing ones keep the shapes of a
    compiled forward fixed across rebuilds.
    """

    growth: float
    exact: bool
    value: int = 0

    def fit(self, need: int) -> int:
        """The capacity for `need` rows (grows when exceeded; exact mode follows `need`)."""
        if self.exact:
            self.value = need
        elif need > self.value:
            self.value = max(need, math.ceil(need * self.growth), 8)
        return self.value
