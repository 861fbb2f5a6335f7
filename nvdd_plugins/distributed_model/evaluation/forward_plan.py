"""`ForwardPlan`: what a model's forwards may skip, decided once per rebuild; and the
preconditions of a compiled forward (`require_compilable`), written once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from nvdd_plugins.config import DomainConfig
from nvdd_plugins.geometry import images_unambiguous
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import MLIPSpec

__all__ = ["ForwardPlan", "require_compilable"]


@dataclass(frozen=True)
class ForwardPlan:
    """How the forwards on one view run after its first (checked) one.

    Attributes:
        compiled: they run compiled at fixed shapes (refreshes return new tensors).
        marked: eager ones run without op interception, refreshing the aggregations the
            model passes through `scattered_onto_nodes` (spec: `aggregations_marked`).
        target_row: the row of `edge_index` every aggregation writes onto, so eager ones
            drop the edges into ghost rows (spec: `edge_target_row`); None: every edge.
        owned_rows: a marked forward offers the model `owned_rows()`: only when every rank
            owns atoms, since that path exchanges differently and a model may not run it on
            zero rows.
    """

    compiled: bool
    marked: bool
    target_row: int | None
    owned_rows: bool

    @classmethod
    def of(cls, spec: MLIPSpec, config: DomainConfig, all_own: Callable[[], bool]) -> ForwardPlan:
        """The plan for `spec` under `config`; `all_own` (collective) is asked if it marks."""
        compiled = config.compile
        marked = spec.distribution.aggregations_marked and not compiled
        target_row = None if compiled else spec.distribution.edge_target_row
        return cls(compiled, marked, target_row, marked and all_own())

    @property
    def shortcuts(self) -> bool:
        """Whether eager forwards take a shortcut the spec claims (checked once)."""
        return self.marked or self.target_row is not None


def require_compilable(
    model: BaseModelMixin,
    config: DomainConfig,
    cell: torch.Tensor | None = None,
    pbc: torch.Tensor | None = None,
) -> None:
    """With fixed shapes (`config.fixed_shapes`: compile or CUDA graphs), a clear error when
    `model` (and, given, a view in `cell` (3, 3) periodic along `pbc` (3,)) cannot run at
    them: the Verlet pairs up to cutoff + skin are handed to it unfiltered."""
    if not config.fixed_shapes:
        return
    neighbors = model.model_config.neighbor_config
    if not (neighbors and neighbors.accepts_skin_pairs):
        raise ValueError(
            "compile=True and cuda_graphs run at fixed shapes without filtering pairs, so "
            "they need a model that weighs pairs beyond its cutoff exactly zero "
            "(NeighborConfig(accepts_skin_pairs=True))"
        )
    if cell is not None and not images_unambiguous(cell, pbc, config.halo_width):
        raise ValueError(
            "compile=True and cuda_graphs pass Verlet pairs up to cutoff + skin unfiltered, "
            "which needs every periodic cell width above 2 x (cutoff + skin) = "
            f"{2 * config.halo_width:g} Å: lower the skin or run without compile and "
            "cuda_graphs"
        )
