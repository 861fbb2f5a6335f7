"""`ReplicatedModel`: every rank holds the same full system (the ASE calculator's layout)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from nvdd_plugins.config import DomainConfig
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.layouts.model import SubdomainModel
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.spec import OutputKind

__all__ = ["ReplicatedModel"]


class ReplicatedModel(SubdomainModel):
    """Evaluate a system every rank holds in full: each rank computes the atoms it owns plus
    ghosts (selected, never migrated) and per-atom results are gathered, so every rank
    returns identical full-system results.

    Args:
        model: a `BaseModelMixin` wrapper with per-atom "energies" output.
        config: the `DomainConfig` (cutoff must cover the model's).
        mesh: communicator; default `config.mesh`.
    """

    def __init__(self, model: BaseModelMixin, config: DomainConfig, mesh: Any = None) -> None:
        super().__init__(model, config, mesh)
        self._owned_ids: torch.Tensor | None = None  # of the last rebuild

    def forward(
        self, full: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """Energy, forces (and what else `properties` asks for) of the full system `full`,
        the same on every rank (collective)."""
        if self.domain.partitioner is None:
            self.setup(full)
        ids = self._owned_ids
        tracked = full.positions if ids is None else full.positions[ids]
        tracked_ids = torch.arange(len(tracked), device=tracked.device) if ids is None else ids
        rebuild = self._rebuild_needed(tracked, full.cell[0], tracked_ids)
        if rebuild:
            ids = self.domain.select_owned(full.positions, full.cell[0])
            self._owned_ids = ids
        owned = full.select_nodes(ids)
        owned.add_node_property("global_ids", ids)
        if rebuild:
            self.rebuild(owned)
        local = self.evaluate_view(self.domain.view, owned, properties)
        kinds = self.engine.spec.output_kinds
        per_node = {k: v for k, v in local.items() if kinds.get(k) is OutputKind.PER_NODE}
        return {**local, **self.comm.gather_by_id(ids, per_node)}
