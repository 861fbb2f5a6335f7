"""`DomainConfig` and `StrategyKind`: how a system is decomposed across ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["DomainConfig", "StrategyKind"]


class StrategyKind(StrEnum):
    """Distribution strategy: spatial halo (default) or graph (index) partition."""

    HALO = "halo"
    GRAPH_PARTITION = "graph_partition"


@dataclass
class DomainConfig:
    """Decomposition settings.

    Args:
        cutoff: the model's interaction cutoff, Å.
        skin: Verlet skin, Å. Ghosts cover cutoff + skin; the neighbour list and ghosts are
            rebuilt when an atom moved more than (skin - migration_hysteresis) / 2.
        mesh: the communicator to decompose over (`DistributedManager.mesh`, an mpi4py
            communicator wrapper, or a simulated mesh); None takes the initialised
            `DistributedManager`'s world mesh, or a single rank.
        strategy: `StrategyKind.HALO` or `StrategyKind.GRAPH_PARTITION`.
        compile: run the model forward through `torch.compile` at fixed, padded shapes.
        compile_mode: `torch.compile`'s mode (e.g. "max-autotune-no-cudagraphs"); None is
            its default.
        migration_hysteresis: distance (Å, < skin) an atom may stray outside its
            sub-domain before it migrates at a rebuild.
        grid: force the rank grid (px, py, pz); None picks the minimal-surface grid.
        capacity_growth: factor by which padded per-rank capacities grow when exceeded.
        strict: raise instead of warning when the model calls an opaque op
            (`torch.ops.<namespace>`) on per-atom tensors that no `OpAdapter` covers.
    """

    cutoff: float
    skin: float = 0.0
    mesh: Any = None
    strategy: StrategyKind = StrategyKind.HALO
    compile: bool = False
    compile_mode: str | None = None
    migration_hysteresis: float = 0.0
    grid: tuple[int, int, int] | None = None
    capacity_growth: float = 1.25
    strict: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cutoff) and self.cutoff > 0):
            raise ValueError(f"cutoff must be a positive number of Å, got {self.cutoff!r}")
        if not (math.isfinite(self.skin) and self.skin >= 0):
            raise ValueError(f"skin must be >= 0 Å, got {self.skin!r}")
        hysteresis = self.migration_hysteresis
        if hysteresis < 0 or (hysteresis > 0 and hysteresis >= self.skin):
            raise ValueError(
                f"migration_hysteresis ({hysteresis} Å) must be 0 or in (0, skin = {self.skin} Å)"
            )
        self.strategy = StrategyKind(self.strategy)
        if self.grid is not None:
            grid = tuple(int(g) for g in self.grid)
            if len(grid) != 3 or min(grid) < 1:
                raise ValueError(f"grid must be three positive integers, got {self.grid!r}")
            self.grid = grid  # type: ignore[assignment]
        if self.capacity_growth <= 1.0:
            raise ValueError("capacity_growth must be > 1")

    @property
    def halo_width(self) -> float:
        """Ghost shell width, Å: cutoff + skin."""
        return self.cutoff + self.skin

    @property
    def rebuild_threshold(self) -> float:
        """Max displacement (Å) since the last rebuild that still needs no rebuild."""
        return 0.5 * (self.skin - self.migration_hysteresis)
