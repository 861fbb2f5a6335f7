"""`ForwardPlan`: what a model's forwards may skip and which pairs they see, decided once
per rebuild; and the preconditions of a compiled forward (`require_compilable`), written once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

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
        target_row: the row of `edge_index` every aggregation writes onto, so forwards
            drop the edges into ghost rows (spec: `edge_target_row`; at fixed shapes the
            others fill a capacity up, `PairCapacity`); None: every edge.
        skin_pairs: the model is handed the view's Verlet pairs up to cutoff + skin as they
            are; else the pairs beyond its cutoff hold the sentinel.
        owned_rows: a marked forward offers the model `owned_rows()`: only when every rank
            owns atoms, since that path exchanges differently and a model may not run it on
            zero rows (asked at the checked forward: `owned_by_all`).
    """

    compiled: bool
    marked: bool
    target_row: int | None
    skin_pairs: bool
    owned_rows: bool = False

    @classmethod
    def of(
        cls,
        model: BaseModelMixin,
        spec: MLIPSpec,
        config: DomainConfig,
        cell: torch.Tensor | None = None,
        pbc: torch.Tensor | None = None,
    ) -> ForwardPlan:
        """The plan for `model` under `spec` and `config` on a view built in `cell` (3, 3)
        periodic along `pbc` (3,); without `cell`, before any view was built. Raises when
        a compiled forward cannot run on that view (`require_compilable`)."""
        require_compilable(model, config, cell, pbc)
        compiled = config.compile
        marked = spec.distribution.aggregations_marked and not compiled
        target_row = spec.distribution.edge_target_row
        return cls(compiled, marked, target_row, _skin_pairs(model, config, cell, pbc))

    def owned_by_all(self, all_own: Callable[[], bool]) -> ForwardPlan:
        """This plan with `owned_rows` decided; `all_own` (collective) is asked if it marks."""
        return replace(self, owned_rows=self.marked and all_own())

    @property
    def shortcuts(self) -> bool:
        """Whether forwards take a shortcut the spec claims (checked once)."""
        return self.marked or self.target_row is not None


def _skin_pairs(
    model: BaseModelMixin,
    config: DomainConfig,
    cell: torch.Tensor | None,
    pbc: torch.Tensor | None,
) -> bool:
    """Whether `model` may be handed the Verlet pairs beyond its cutoff unfiltered, on a
    view built in `cell` along `pbc` (without `cell`: as the model's neighbours declare)."""
    neighbors = model.model_config.neighbor_config
    if not (neighbors and neighbors.accepts_skin_pairs):
        return False  # the model counts every pair it is given
    if cell is None:
        return neighbors.passes_skin_pairs(config.fixed_shapes)
    if neighbors.prune_skin_pairs and not config.fixed_shapes:
        # Without a skin the list holds the pairs within the cutoff only, and any motion
        # rebuilds it: filtering would change nothing (but pairs at the cutoff to within
        # rounding, which such a model weighs zero).
        return config.skin == 0.0
    return images_unambiguous(cell, pbc, config.halo_width)


def require_compilable(
    model: BaseModelMixin,
    config: DomainConfig,
    cell: torch.Tensor | None = None,
    pbc: torch.Tensor | None = None,
) -> None:
    """With fixed shapes (`config.fixed_shapes`: compile or CUDA graphs), a clear error when
    `model` (and, given, a view in `cell` (3, 3) periodic along `pbc` (3,)) cannot run at
    them: a model that weighs pairs beyond its cutoff zero is handed the Verlet pairs up to
    cutoff + skin unfiltered, which needs unambiguous periodic images. (Any other model
    has the pairs beyond its cutoff turned into the view's far padding pair each step.)"""
    if not config.fixed_shapes:
        return
    neighbors = model.model_config.neighbor_config
    if not (neighbors and neighbors.accepts_skin_pairs):
        return
    if cell is not None and not images_unambiguous(cell, pbc, config.halo_width):
        raise ValueError(
            "compile=True and cuda_graphs pass Verlet pairs up to cutoff + skin unfiltered, "
            "which needs every periodic cell width above 2 x (cutoff + skin) = "
            f"{2 * config.halo_width:g} Å: lower the skin or run without compile and "
            "cuda_graphs"
        )
