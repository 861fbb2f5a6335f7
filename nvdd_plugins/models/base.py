"""Model wrapper base: `BaseModelMixin`, `ModelConfig`, `NeighborConfig`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum

import torch

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.spec import MLIPSpec

__all__ = [
    "BaseModelMixin",
    "ModelConfig",
    "ModelInputs",
    "NeighborConfig",
    "NeighborListFormat",
    "host_checks_allowed",
    "model_dtype",
    "without_host_checks",
]


class NeighborListFormat(StrEnum):
    """Neighbour list layout a model consumes. COO: `edge_index` (2, n_edges) rows (i, j),
    pair vector `x[j] - x[i] + shifts`, both directions present."""

    COO = "coo"


_HOST_CHECKS_OFF: ContextVar[bool] = ContextVar("nvdd_host_checks_off", default=False)


def host_checks_allowed() -> bool:
    """Whether a forward may check device values on the host (a synchronisation, or a
    data-dependent shape): not while `torch.compile` traces it, nor while a CUDA graph
    captures it, nor inside `without_host_checks`."""
    if torch.compiler.is_compiling() or _HOST_CHECKS_OFF.get():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


@contextmanager
def without_host_checks() -> Iterator[None]:
    """Run the block as a CUDA graph capture sees it: `host_checks_allowed()` is False (a
    CPU stand-in for a capture runs a step's Python exactly as the capture would)."""
    token = _HOST_CHECKS_OFF.set(True)
    try:
        yield
    finally:
        _HOST_CHECKS_OFF.reset(token)


@dataclass(frozen=True)
class NeighborConfig:
    """The neighbour list a model needs.

    Args:
        cutoff: interaction cutoff, Å.
        format: layout of the list.
        accepts_skin_pairs: the model gives pairs at r >= cutoff exactly zero weight, so a
            Verlet list (pairs up to cutoff + skin) may be passed without filtering it every
            step. Leave False unless that holds bit for bit.
        prune_skin_pairs: drop the pairs beyond the cutoff before every eager evaluation all
            the same, because each pair costs the model far more than the distance check
            (message passing: a skin of 0.5 Å at a 5 Å cutoff is a third more pairs).
            Compiled runs pass them (fixed shapes).
        ghost_pair_cutoff: the model also reads the pairs closer than this (Å) whose two
            atoms are ghost rows (features on pairs updated from the pairs around them,
            such as CHGNet's 3 Å bond graph), so views list them besides the pairs touching
            an owned atom. The halo strategy only: graph partition and LAMMPS refuse it.
        ghost_layers: cutoffs of ghosts the model needs when ghost atom rows are refreshed
            after every aggregation onto atoms (1 for message passing on atoms; more for a
            model whose pair features see further than one cutoff between two refreshes).
    """

    cutoff: float
    format: NeighborListFormat = NeighborListFormat.COO
    accepts_skin_pairs: bool = False
    prune_skin_pairs: bool = False
    ghost_pair_cutoff: float | None = None
    ghost_layers: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cutoff) and self.cutoff > 0):
            raise ValueError(f"cutoff must be a finite number > 0 Å, got {self.cutoff!r}")
        ghost_pairs = self.ghost_pair_cutoff
        if ghost_pairs is not None and not (math.isfinite(ghost_pairs) and ghost_pairs > 0):
            raise ValueError(f"ghost_pair_cutoff must be > 0 Å or None, got {ghost_pairs!r}")
        if not (isinstance(self.ghost_layers, int) and self.ghost_layers >= 1):
            raise ValueError(f"ghost_layers must be a positive integer, got {self.ghost_layers!r}")

    def passes_skin_pairs(self, compiled: bool = False) -> bool:
        """Whether a Verlet list (pairs up to cutoff + skin) is handed to the model without
        filtering: the model weighs the pairs beyond its cutoff zero and does not ask for
        them to be pruned (a compiled forward never prunes: its shapes are fixed)."""
        return self.accepts_skin_pairs and (compiled or not self.prune_skin_pairs)


@dataclass(frozen=True)
class ModelConfig:
    """What a wrapped model produces and needs.

    Args:
        autograd_outputs: outputs the framework derives by autograd from the energy
            ("forces" = -dE/dpositions, "stress" = dE/dstrain / volume).
        autograd_inputs: inputs those derivatives are taken with respect to ("positions").
        neighbor_config: the neighbour list to build, or None for a model without one.
        edge_energy: the energy depends on positions only through the edge vectors, so it
            has a derivative per edge (per-atom virials, LAMMPS pair forces). False for a
            model with a term of the positions themselves (a reciprocal-space sum), which
            then refuses per-edge derivatives instead of leaving that term out.
    """

    autograd_outputs: frozenset[str] = frozenset()
    autograd_inputs: frozenset[str] = frozenset()
    neighbor_config: NeighborConfig | None = None
    edge_energy: bool = True

    def __post_init__(self) -> None:
        for name in ("autograd_outputs", "autograd_inputs"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        unknown = self.autograd_outputs - {"forces", "stress"}
        if unknown:
            raise ValueError(f"autograd can only derive forces and stress, not {sorted(unknown)}")
        if self.autograd_outputs and "positions" not in self.autograd_inputs:
            raise ValueError('autograd outputs need autograd_inputs={"positions"}')

    @classmethod
    def by_autograd(cls, neighbor_config: NeighborConfig) -> ModelConfig:
        """A model of energies only: forces and stress derived by autograd from positions."""
        return cls(frozenset({"forces", "stress"}), frozenset({"positions"}), neighbor_config)


@dataclass
class ModelInputs:
    """What `BaseModelMixin.adapt_input` hands to a forward: sentinel-free tensors."""

    positions: torch.Tensor
    atomic_numbers: torch.Tensor
    edge_index: torch.Tensor
    shifts: torch.Tensor
    cell: torch.Tensor
    pbc: torch.Tensor
    batch_idx: torch.Tensor
    ptr: torch.Tensor
    num_graphs: int


class BaseModelMixin:
    """Mixin for model wrappers (use with `torch.nn.Module`).

    A wrapper sets `model_config`, implements `forward(batch) -> dict[str, Tensor]` with
    per-atom "energies" over all atoms of the batch, and may override `adapt_input` and
    `distribution_spec`. The forward never talks to other ranks.
    """

    model_config: ModelConfig

    @property
    def cutoff(self) -> float:
        """Interaction cutoff in Å (from the neighbour config)."""
        if self.model_config.neighbor_config is None:
            raise ValueError(f"{type(self).__name__} declares no neighbor_config")
        return self.model_config.neighbor_config.cutoff

    def adapt_input(self, batch: Batch) -> ModelInputs:
        """Batch -> model inputs; drops padding edges whose indices are >= n_atoms.

        Compiled distributed runs carry no such edges (empty slots hold far-apart padding
        pairs instead), and filtering would give data-dependent shapes, so it is skipped there.
        """
        n = batch.num_nodes
        edge_index = batch.get("edge_index")
        if edge_index is None:
            raise ValueError(
                f"{type(self).__name__} needs a neighbour list: evaluate it through "
                "nvdd_plugins.models.evaluate_model, a dynamics, or DistributedModel"
            )
        shifts = batch.get("shifts")
        if shifts is None:
            shifts = batch.positions.new_zeros(edge_index.shape[1], 3)
        # one reduction finds whether any slot holds a padding sentinel (most views have none)
        if host_checks_allowed() and edge_index.numel() and edge_index.max() >= n:
            valid = (edge_index[0] < n) & (edge_index[1] < n)
            edge_index, shifts = edge_index[:, valid], shifts[valid]
        return ModelInputs(
            positions=batch.positions,
            atomic_numbers=batch.atomic_numbers,
            edge_index=edge_index,
            shifts=shifts,
            cell=batch.cell,
            pbc=batch.pbc,
            batch_idx=batch.batch_idx,
            ptr=batch.ptr,
            num_graphs=batch.num_graphs,
        )

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """The model's distribution contract for `strategy`; None: not distributable."""
        return None

    def supported_species(self) -> tuple[int, ...] | None:
        """The atomic numbers the model has parameters for, ascending; None: any."""
        return None

    def prepare_for_compile(self) -> BaseModelMixin:
        """A wrapper whose forward `torch.compile` can trace (default: this one); raises a
        ValueError saying why when the model cannot run with compile=True."""
        return self


def model_dtype(model: torch.nn.Module) -> torch.dtype | None:
    """The dtype of the model's first floating-point parameter or buffer (the dtype it
    computes in), or None for a model without one (any dtype serves it)."""
    tensors = [*model.parameters(), *model.buffers()]
    return next((t.dtype for t in tensors if t.is_floating_point()), None)
