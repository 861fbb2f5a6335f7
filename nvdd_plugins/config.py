"""`DomainConfig` and `StrategyKind`: how a system is decomposed across ranks."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import InitVar, dataclass
from enum import StrEnum
from typing import Any, Literal

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
        chunk_atoms: evaluate each rank's sub-domain in spatial chunks, one after another
            on its device, each of at most this many rows (its atoms plus a ghost shell of
            the model's message-passing layers x cutoff), so that device memory is bounded
            by one chunk; "auto" sizes chunks from the free device memory and the model's
            measured bytes per row (one chunk on a CPU). The ranks' ghost shells are then
            that thick too and the forward needs no halo exchange (halo strategy only).
            None: the whole sub-domain at once, ghost rows refreshed per layer.
        halo_layers: ghost shell thickness in cutoffs; None: one, or with `chunk_atoms` the
            model's message-passing layers (`MLIPSpec.n_layers`; give it here for a model
            whose spec does not declare them).
        balance: "auto" (default): at `partition()` and at each neighbour-list rebuild, when
            the busiest rank owns more than `balance_threshold` times the mean number of
            atoms, the sub-domain boundaries move to equal shares (staggered cuts, see
            docs/balance.md); "off": the regular grid. Halo strategy only (graph partition
            shards are equal by construction).
        balance_threshold: the max / mean cost per rank above which "auto" re-balances.
        balance_weight: the cost "auto" balances: "atoms" (default), the atoms a rank owns;
            "rows", its owned plus ghost rows (what the model evaluates); "time", the
            seconds its forwards spent outside communication since the last re-balance
            check (measured; owned atoms until a first forward has been timed).
        grid_dims: nvalchemi's name of `grid`.
        mesh_dim: with a multi-dimensional `DeviceMesh` as `mesh`, the name of the dimension
            to decompose over (the mesh becomes `mesh[mesh_dim]`).
        ghost_width: nvalchemi's ghost shell width, Å; nvdd's is `halo_width`
            (halo_layers x cutoff + skin, exact with a per-layer refresh), so a wider one
            changes nothing and a thinner one is refused.
        cuda_graphs: replay the MD step between neighbour-list rebuilds as one captured CUDA
            graph (docs/cuda_graphs.md). "auto" (default): on for an integrator that can be
            captured (`BaseDynamics.capturable`: `NVE`, `NVTLangevin`) with a model on a
            CUDA device, at one rank, halo strategy, no `chunk_atoms`, for as long as the
            graphs save more time than their captures cost (measured as the run goes: off
            for large systems, whose steps are bound by their kernels); off otherwise, and
            always on the CPU. True: graphs wherever they can work, with a clear error where
            they cannot. False: eager steps. Graphs need fixed shapes, so views are then
            padded as with `compile` (`fixed_shapes`).
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
    chunk_atoms: int | Literal["auto"] | None = None
    halo_layers: int | None = None
    balance: Literal["auto", "off"] = "auto"
    balance_threshold: float = 1.05
    balance_weight: Literal["atoms", "rows", "time"] = "atoms"
    grid_dims: InitVar[tuple[int, int, int] | None] = None
    mesh_dim: InitVar[str | None] = None
    ghost_width: InitVar[float | None] = None
    cuda_graphs: bool | Literal["auto"] = "auto"

    def __post_init__(
        self,
        grid_dims: tuple[int, int, int] | None,
        mesh_dim: str | None,
        ghost_width: float | None,
    ) -> None:
        self._nvalchemi_names(grid_dims, mesh_dim, ghost_width)
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
        if self.balance not in ("auto", "off"):
            raise ValueError(f'balance must be "auto" or "off", got {self.balance!r}')
        if self.balance_weight not in ("atoms", "rows", "time"):
            raise ValueError(
                f'balance_weight must be "atoms", "rows" or "time", got {self.balance_weight!r}'
            )
        if not (math.isfinite(self.balance_threshold) and self.balance_threshold >= 1.0):
            raise ValueError(
                f"balance_threshold (max / mean owned atoms) must be >= 1, got "
                f"{self.balance_threshold!r}"
            )
        if not (isinstance(self.cuda_graphs, bool) or self.cuda_graphs == "auto"):  # not 0, 1
            raise ValueError(f'cuda_graphs must be True, False or "auto", got {self.cuda_graphs!r}')
        if self.capacity_growth <= 1.0:
            raise ValueError("capacity_growth must be > 1")
        if self.halo_layers is not None and self.halo_layers < 1:
            raise ValueError(f"halo_layers must be >= 1, got {self.halo_layers!r}")
        if self.chunk_atoms is not None:
            if self.chunk_atoms != "auto" and not (
                isinstance(self.chunk_atoms, int) and self.chunk_atoms > 0
            ):
                raise ValueError(
                    f'chunk_atoms must be a positive number of rows, "auto" or None, got '
                    f"{self.chunk_atoms!r}"
                )
            if self.strategy is not StrategyKind.HALO or self.compile:
                raise ValueError(
                    "chunk_atoms (sub-domains evaluated in chunks) needs the halo strategy "
                    "and an eager forward (compile=False)"
                )

    def _nvalchemi_names(
        self,
        grid_dims: tuple[int, int, int] | None,
        mesh_dim: str | None,
        ghost_width: float | None,
    ) -> None:
        """Take nvalchemi's `grid_dims`, `mesh_dim` and `ghost_width`."""
        if grid_dims is not None:
            if self.grid is not None:
                raise ValueError("give grid or grid_dims (the same setting), not both")
            self.grid = grid_dims
        if mesh_dim is not None:
            if self.mesh is None or not hasattr(self.mesh, "mesh_dim_names"):
                raise ValueError(f"mesh_dim={mesh_dim!r} needs a DeviceMesh with named dimensions")
            self.mesh = self.mesh[mesh_dim]
        if ghost_width is not None and ghost_width < self.halo_width:
            raise ValueError(
                f"ghost_width={ghost_width} Å is thinner than the ghost shell nvdd needs, "
                f"halo_width = {self.halo_width:g} Å ((halo_layers or 1) x cutoff + skin): "
                "leave ghost_width out"
            )

    @property
    def halo_width(self) -> float:
        """Ghost shell width, Å: halo_layers (default 1) x cutoff + skin."""
        return (self.halo_layers or 1) * self.cutoff + self.skin

    @property
    def fixed_shapes(self) -> bool:
        """Whether views keep fixed, padded shapes between rebuilds (capacities growing by
        `capacity_growth`, empty pair slots holding far-apart padding pairs, Verlet pairs
        handed to the model unfiltered): for `compile` and for CUDA graphs."""
        return self.compile or self.cuda_graphs is True

    def with_graphs_resolved(self, conditions: Mapping[str, bool], on_cuda: bool) -> DomainConfig:
        """This config with `cuda_graphs` True or False. `conditions` maps what graphs need
        (in words) to whether the caller meets it; the halo strategy and no `chunk_atoms`
        are added here. "auto" is on when all are met and the model is `on_cuda`; True
        raises a ValueError naming what is missing (a CPU device is refused at capture)."""
        if self.cuda_graphs is False:
            return self
        needs = {
            **conditions,
            "the halo strategy": self.strategy is StrategyKind.HALO,
            "the whole sub-domain at once (chunk_atoms=None)": self.chunk_atoms is None,
        }
        missing = [need for need, met in needs.items() if not met]
        if missing and self.cuda_graphs is True:
            raise ValueError(
                f"cuda_graphs=True needs {'; '.join(missing)}: pass cuda_graphs=False or 'auto'"
            )
        wanted = on_cuda or self.cuda_graphs is True
        return dataclasses.replace(self, cuda_graphs=not missing and wanted)

    @property
    def rebuild_threshold(self) -> float:
        """Max displacement (Å) since the last rebuild that still needs no rebuild."""
        return 0.5 * (self.skin - self.migration_hysteresis)
