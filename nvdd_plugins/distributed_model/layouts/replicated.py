"""`ReplicatedModel`: every rank holds the same full system (the ASE calculator's layout)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from nvdd_plugins.data import Batch, FieldLevel
from nvdd_plugins.distributed_model.evaluation.health import (
    NonFiniteError,
    non_finite_error,
    non_finite_kinds,
)
from nvdd_plugins.distributed_model.evaluation.results import Replicated
from nvdd_plugins.distributed_model.layouts.model import SubdomainModel
from nvdd_plugins.models import HEAT_FLUX_TENSORS
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
        captured_steps: its caller may capture the evaluation as a CUDA graph (the ASE
            calculator's force call; `config.cuda_graphs` is resolved against it).
    """

    _owned_ids: torch.Tensor | None = None  # of the last rebuild
    _owned_rows: tuple[torch.Tensor, torch.Tensor] | None = None  # its ptr, batch_idx

    def forward(
        self, full: Batch, properties: Iterable[str] = ("energy", "forces")
    ) -> dict[str, torch.Tensor]:
        """Energy, forces (and what else `properties` asks for) of the full system `full`,
        the same on every rank (collective)."""
        if self.domain.partitioner is None:
            self.setup(full)
        return super().forward(full, properties)

    def owned_rows(self, full: Batch) -> Batch:
        """The owned atoms of `full` (those of the last rebuild; before it, every atom) with
        their global ids; `select_nodes` without its host-side order check, which the
        rebuild made."""
        ids, rows = self._owned_ids, self._owned_rows
        if ids is None or rows is None:
            ids, rows = torch.arange(full.num_nodes, device=full.device), (full.ptr, full.batch_idx)
        node = {name: value[ids] for name, value in full.fields(FieldLevel.NODE)}
        node["global_ids"] = ids
        return Batch(node, {}, dict(full.fields(FieldLevel.SYSTEM)), *rows)

    def moved_rows(self, full: Batch) -> Batch:
        """The atoms of `full` this rank owns now, selected (never migrated), and the
        placement that gathers every rank's (collective)."""
        ids = self.domain.select_owned(full.positions, full.cell[0])
        owned = full.select_nodes(ids)
        self._owned_ids, self._owned_rows = ids, (owned.ptr, owned.batch_idx)
        order = torch.argsort(torch.cat(self.comm.all_gather(ids)))
        kinds = self.engine.spec.output_kinds
        per_atom = {k for k, kind in kinds.items() if kind is OutputKind.PER_NODE}
        self.placement = Replicated(order, frozenset(per_atom | {HEAT_FLUX_TENSORS}))
        return self.owned_rows(full)

    def non_finite_error(self, energies: torch.Tensor, forces: torch.Tensor) -> NonFiniteError:
        """The error to raise when the last results' per-atom `energies` or `forces` (by
        atom, as returned) are NaN or infinite, naming the atoms by the rank that computed
        them (collective: every rank holds the same results, so all call it alike)."""
        assert self._owned_ids is not None
        ids = self._owned_ids.cpu()
        kinds = non_finite_kinds(energies.cpu()[ids], forces.cpu()[ids])
        return non_finite_error(self.comm, ids, kinds)
