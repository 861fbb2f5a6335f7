"""`DistributedModel`: runs an unchanged model wrapper on one rank's atoms plus ghosts (halo
or graph partition, as `DomainConfig.strategy` says), each rank holding only its atoms."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from nvdd_plugins.comm import Communicator, TimedCommunicator, computing, resolve_communicator
from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.evaluation.engine import HaloEngine
from nvdd_plugins.distributed_model.evaluation.health import (
    NON_FINITE,
    REBUILD,
    any_non_finite,
    non_finite_error,
    non_finite_kinds,
    rebuild_status,
)
from nvdd_plugins.distributed_model.evaluation.results import OwnedRows, Placement
from nvdd_plugins.distributed_model.rows.domain import HaloDomain
from nvdd_plugins.distributed_model.rows.graph_partition import GraphDomain
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.models import HEAT_FLUX_TENSORS, BaseModelMixin, NeighborConfig, asking_for

__all__ = ["DistributedModel", "SubdomainModel"]

_DEFAULT_PROPERTIES = ("energy", "forces")
_NO_RESULTS: tuple[None, None, None] = (None, None, None)
_OWNED_ROWS = OwnedRows()


class SubdomainModel(nn.Module):
    """What every layout of a model over sub-domains shares: this rank's communicator, the
    engine that runs the model on a view, the decomposition state (`domain`), and the
    rebuild and NaN checks. Layouts differ in which atoms a rank holds and how results map
    back to them (`DistributedModel`, `ReplicatedModel`).

    Args:
        model: a `BaseModelMixin` wrapper with per-atom "energies" output.
        config: the `DomainConfig` (cutoff must cover the model's).
        mesh: communicator; default `config.mesh`.
        captured_steps: an integrator drives this model whose step may be captured as a
            CUDA graph (`config.cuda_graphs` is resolved against it).
    """

    def __init__(
        self,
        model: BaseModelMixin,
        config: DomainConfig,
        mesh: Any = None,
        captured_steps: bool = False,
    ) -> None:
        super().__init__()
        self.comm: Communicator = resolve_communicator(mesh if mesh is not None else config.mesh)
        if config.balance_weight == "time":  # weighs ranks by the time they compute
            self.comm = TimedCommunicator(self.comm)
        neighbors = model.model_config.neighbor_config
        needs = {
            "an integrator whose step can be captured (BaseDynamics.capturable)": captured_steps,
            "one rank (multi-rank capture is not implemented)": self.comm.size == 1,
            "a model weighing pairs beyond its cutoff zero (accepts_skin_pairs)": bool(
                neighbors and neighbors.accepts_skin_pairs
            ),
        }
        self._graphs_required = config.cuda_graphs is True
        config = _with_model_ghosts(config.with_graphs_resolved(needs, _on_cuda(model)), neighbors)
        self.engine = HaloEngine(model, config, self.comm)
        self.config = config
        self.model = self.engine.model  # a submodule, so .to() and state_dict() reach it
        width, chunked = self.engine.shell.halo_width(config), self.engine.chunks is not None
        self.domain: HaloDomain | GraphDomain = (
            GraphDomain(self.comm, config)
            if config.strategy is StrategyKind.GRAPH_PARTITION
            else HaloDomain(
                self.comm,
                config,
                width,
                list_pairs=not chunked,  # chunks list theirs
                ghost_pair_cutoff=neighbors.ghost_pair_cutoff if neighbors else None,
            )
        )
        # energy, forces and per-atom energies of the last `forward`, checked for NaN/inf at
        # the next step; forgotten when the owned rows change other than by that step
        self._last_results: tuple[torch.Tensor | None, ...] = _NO_RESULTS

    def setup(self, full: Batch | None) -> None:
        """Fix the decomposition from the full system on rank 0 (collective)."""
        self.domain.setup(full)
        self._last_results = _NO_RESULTS

    def _rebuild_needed(
        self, positions: torch.Tensor, cell: torch.Tensor, ids: torch.Tensor
    ) -> bool:
        energy, *per_atom = self._last_results
        positions = positions.detach()
        non_finite = any_non_finite(positions, energy, tuple(per_atom))
        stale = self.domain.verlet.stale(positions, cell)
        status = rebuild_status(self.comm, stale, non_finite)
        if status == NON_FINITE:
            forces, energies = per_atom
            raise non_finite_error(self.comm, ids, non_finite_kinds(energies, forces, positions))
        return status == REBUILD

    def image_axes_for(self, properties: Iterable[str]) -> None:
        """Before the rebuild check of an evaluation of `properties`: the heat flux needs
        every periodic image of an atom as a row of its own, so from the first evaluation
        asking for it on, views image every periodic axis (collective: every rank asks
        for the same properties)."""
        if HEAT_FLUX_TENSORS in properties and isinstance(self.domain, HaloDomain):
            self.domain.image_periodic_axes()

    def rebuild(self, owned: Batch) -> HaloView:
        """Build the view of `owned` (this rank's atoms at their current positions) and have
        the engine re-decide what it may skip for that view (collective). Every rebuild,
        a restored checkpoint's included, comes through here."""
        view = self.domain.build(owned)
        self.engine.rebuilt(owned.cell[0], owned.pbc[0])
        self._last_results = _NO_RESULTS
        return view

    def owners(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Owning rank of each position of the full system for the current cell."""
        return self.domain.owners(positions, cell)

    @property
    def rebuilds(self) -> int:
        """Views built so far."""
        return self.domain.rebuilds

    def evaluate_view(
        self,
        view: HaloView,
        owned: Batch,
        properties: Iterable[str] = _DEFAULT_PROPERTIES,
        to: Placement = _OWNED_ROWS,
    ) -> dict[str, torch.Tensor]:
        """Evaluate the model on a prepared `view` whose owned rows are `owned`'s atoms.

        Ghost positions come from their owners through `copy_to_ghosts`, so the returned
        "forces" are complete for the owned atoms. Returns detached tensors: "energy" (1,)
        and "stress" (1,3,3) identical on every rank; per-atom outputs placed as `to` says
        (default: for the owned atoms).
        """
        wanted = self.engine.wanted(properties)
        leaf = owned.positions.detach().requires_grad_(wanted.forces or wanted.heat_flux)
        with torch.enable_grad():
            rows = view.positions(leaf, owned.cell[0].detach(), self.comm)
        with computing(self.comm, leaf.device), asking_for(properties):
            return self.engine.evaluate(view, leaf, rows, owned.cell, owned.pbc, wanted, to)

    # -- evaluations captured as CUDA graphs (`FixedShapeEvaluator`) -----------------------
    def graph_token(self, batch: Batch) -> tuple[int, int, int | None] | None:
        """The current view's identity when an evaluation may be captured now, else None:
        graphs are on (`config.cuda_graphs`) and the next forward is not the checked one
        (the first after a rebuild runs eagerly). It changes at every rebuild and when the
        capacity of pairs within the cutoff grows."""
        runner = self.engine.runner
        if self.config.cuda_graphs is not True or runner.checking:
            return None
        pairs = None if runner.pairs is None else runner.pairs.version
        return (self.domain.rebuilds, id(self.domain.view), pairs)

    def graphs_required(self) -> bool:
        """Whether `cuda_graphs=True` was asked for (not "auto")."""
        return self._graphs_required

    def rows_stale(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """0-d bool on the device: the owned rows' `positions` (in the order of the last
        rebuild) need a rebuild or are not finite, `cell` changed, or the last evaluation
        overflowed its pair capacity (no host synchronisation; one rank only)."""
        positions = positions.detach()
        stale = self.domain.verlet.stale(positions, cell) | any_non_finite(positions)
        pairs = self.engine.runner.pairs
        if pairs is not None and pairs.overflow is not None:
            stale = stale | pairs.overflow
        return stale


class DistributedModel(SubdomainModel):
    """Wrap a model wrapper so its forward runs on this rank's owned + ghost atoms, each rank
    holding only its own atoms, which migrate between ranks (the `DomainParallel` layout).

    The model's `distribution_spec(strategy)` says how: during the forward every
    node-indexed scatter is halo-refreshed, node -> system sums keep owned rows only, and
    adapted ops get their transforms. Energy is the sum of the owned per-atom energies,
    all-reduced; forces and stress are derivatives of this rank's owned partial (never of
    the all-reduced total), with ghost contributions summed back to their owners.

    Args:
        model: a `BaseModelMixin` wrapper with per-atom "energies" output.
        config: the `DomainConfig` (cutoff must cover the model's).
        mesh: communicator; default `config.mesh`.
    """

    uses_batch_neighbors = False  # the halo view carries its own list (see `compute_view`)

    def forward(
        self, owned: Batch, properties: Iterable[str] = _DEFAULT_PROPERTIES
    ) -> dict[str, torch.Tensor]:
        """Evaluate with each rank holding only its own atoms (`owned`, with global_ids).

        At a rebuild the atoms of `owned` migrate between ranks (its per-atom fields are
        replaced in place); results are for the owned atoms in `owned`'s current order.
        """
        properties = tuple(properties)
        self.image_axes_for(properties)
        self.prepare(owned)
        result = self.evaluate_view(self.domain.view, owned, properties)
        self._last_results = (result["energy"], result.get("forces"), result.get("energies"))
        return result

    def prepare(self, owned: Batch) -> None:
        """Rebuild ghosts and neighbour list when needed, migrating atoms first (collective).

        Raises `NonFiniteError` on every rank when any rank's positions, or the forces or
        energy of the last evaluation, are NaN or infinite.
        """
        if "global_ids" not in owned:
            raise ValueError("owned batches need global_ids (DomainParallel.partition adds them)")
        if self._rebuild_needed(owned.positions, owned.cell[0], owned.global_ids):
            self.domain.migrate(owned)
            self.rebuild(owned)

    # -- steps captured as CUDA graphs (nvdd_plugins.dynamics.graphed) --------------------
    def stale_for(self, owned: Batch) -> torch.Tensor:
        """0-d bool on the device, no host synchronisation: `owned`'s positions need a
        rebuild (an atom moved more than the threshold, the cell changed) or are not
        finite, or the last evaluation had more pairs within the cutoff than their
        capacity. One rank only: a mesh would all-reduce it."""
        return self.rows_stale(owned.positions, owned.cell[0])

    def evaluate_fixed(
        self, owned: Batch, properties: Iterable[str] = _DEFAULT_PROPERTIES
    ) -> dict[str, torch.Tensor]:
        """`forward` on the current view without the rebuild check (what a captured step
        runs; `stale_for` decides whether its result is kept)."""
        return self.evaluate_view(self.domain.view, owned, properties)

    def check_finite(self, owned: Batch) -> None:
        """Raise `NonFiniteError` on every rank if any rank's positions, or the last forces
        or energy, are NaN or infinite (collective; `prepare` does this every step)."""
        self._rebuild_needed(owned.positions, owned.cell[0], owned.global_ids)

    def compute_view(self, owned: Batch) -> Batch:
        """This rank's padded compute view as a Batch (owned rows, ghosts, padding; edges
        within the cutoff; "global_ids" -1 on padding), for compute-stage hooks."""
        self.prepare(owned)
        view = self.domain.view
        with torch.no_grad():
            rows = view.positions(owned.positions.detach(), owned.cell[0], self.comm)
        batch = self.engine.batch(view, rows, owned.cell, owned.pbc)
        batch.add_node_property("global_ids", view.global_ids)
        return batch


def _with_model_ghosts(config: DomainConfig, neighbors: NeighborConfig | None) -> DomainConfig:
    """`config` with at least the ghost cutoffs the model asks for (`ghost_layers`) under a
    per-layer refresh; a copy, the user's config is left as it is. Refused for graph
    partition when the model reads pairs between ghosts (its views hold no such pairs)."""
    if neighbors is None:
        return config
    if neighbors.ghost_pair_cutoff and config.strategy is StrategyKind.GRAPH_PARTITION:
        raise ValueError(
            "the model reads pairs between ghost atoms (NeighborConfig.ghost_pair_cutoff), "
            "which graph partition does not list: use the halo strategy"
        )
    if config.chunk_atoms is not None or neighbors.ghost_layers <= (config.halo_layers or 1):
        return config
    return dataclasses.replace(config, halo_layers=neighbors.ghost_layers)


def _on_cuda(model: nn.Module) -> bool:
    """Whether the model's first parameter or buffer is on a CUDA device (False without any)."""
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    return tensor is not None and tensor.device.type == "cuda"
