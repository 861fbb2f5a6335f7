"""`DistributedModel`: runs an unchanged model wrapper on one rank's atoms plus ghosts (halo
or graph partition, as `DomainConfig.strategy` says), each rank holding only its atoms."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import torch
from torch import nn

from nvdd_plugins.comm import Communicator, TimedCommunicator, computing, resolve_communicator
from nvdd_plugins.config import DomainConfig, StrategyKind
from nvdd_plugins.data import Batch
from nvdd_plugins.distributed_model.evaluation.derivatives import Wanted
from nvdd_plugins.distributed_model.evaluation.engine import HaloEngine
from nvdd_plugins.distributed_model.evaluation.health import (
    NON_FINITE,
    REBUILD,
    agreed_status,
    any_non_finite,
    non_finite_error,
    non_finite_kinds,
)
from nvdd_plugins.distributed_model.evaluation.results import OwnedRows, Placement
from nvdd_plugins.distributed_model.rows.domain import HaloDomain
from nvdd_plugins.distributed_model.rows.graph_partition import GraphDomain
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.models import HEAT_FLUX_TENSORS, BaseModelMixin, NeighborConfig, asking_for

__all__ = ["DistributedModel", "SubdomainModel"]

_DEFAULT_PROPERTIES = ("energy", "forces")
_NO_RESULTS: tuple[None, None, None] = (None, None, None)


class SubdomainModel(nn.Module):
    """The step every layout of a model over sub-domains shares: one status all-reduce
    (rebuild needed, NaN), one rebuild of the view (`domain`), the ghost positions
    refreshed, the engine's evaluation and its results placed (`placement`). Layouts differ
    only in their row source (`owned_rows`, `moved_rows`: which atoms a rank holds, how
    they move at a rebuild; `view_stale`, `ghost_rows`, `wanted`: when its view goes
    stale, where ghost positions come from, what autograd derives) and placement
    (`DistributedModel`, `ReplicatedModel`, `GivenRowsModel`, which `adopt` an engine and a
    domain of their own).

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
        engine = HaloEngine(model, config, self.comm)
        width, chunked = engine.shell.halo_width(config), engine.chunks is not None
        self.adopt(
            engine,
            GraphDomain(self.comm, config)
            if config.strategy is StrategyKind.GRAPH_PARTITION
            else HaloDomain(
                self.comm,
                config,
                width,
                list_pairs=not chunked,  # chunks list theirs
                ghost_pair_cutoff=neighbors.ghost_pair_cutoff if neighbors else None,
            ),
        )

    def adopt(self, engine: HaloEngine, domain: Any) -> None:
        """Take the step's parts: the engine and the row source's views (`domain`), with
        results placed on the owned rows until a layout says otherwise."""
        self.engine, self.domain = engine, domain
        self.comm, self.config = engine.comm, engine.config
        self.model = engine.model  # a submodule, so .to() and state_dict() reach it
        # energy, forces and per-atom energies of the last `forward`, checked for NaN/inf at
        # the next step; forgotten when the owned rows change other than by that step
        self._last_results: tuple[torch.Tensor | None, ...] = _NO_RESULTS
        self.placement: Placement = OwnedRows()

    def setup(self, full: Batch | None) -> None:
        """Fix the decomposition from the full system on rank 0 (collective)."""
        self.domain.setup(full)
        self._last_results = _NO_RESULTS

    # -- the row source: which atoms a rank holds, and how they move at a rebuild -----------
    def owned_rows(self, batch: Batch) -> Batch:
        """This rank's owned atoms of `batch` (the layout's input), with their global ids, in
        the order of the last rebuild."""
        raise NotImplementedError

    def moved_rows(self, batch: Batch) -> Batch:
        """At a rebuild: the atoms this rank owns from now on (collective)."""
        raise NotImplementedError

    # -- the step -------------------------------------------------------------------------
    def forward(
        self, batch: Batch, properties: Iterable[str] = _DEFAULT_PROPERTIES
    ) -> dict[str, torch.Tensor]:
        """Evaluate `batch` (collective): rebuild the view when needed (`prepare`), refresh
        the ghost positions, evaluate and place the results (`placement`). Returns detached
        tensors: "energy" (1,) and "stress" (1,3,3) identical on every rank, per-atom outputs
        where the placement puts them; those of the owned rows are checked for NaN/inf at
        the next step."""
        properties = tuple(properties)
        # the heat flux needs every periodic image of an atom as a row of its own: from the
        # first evaluation asking for it on, views image every periodic axis (every rank
        # asks for the same properties)
        if HEAT_FLUX_TENSORS in properties and isinstance(self.domain, HaloDomain):
            self.domain.image_periodic_axes()
        result = self._evaluate(self.prepare(batch), properties)
        if isinstance(self.placement, OwnedRows):  # other placements' callers check theirs
            self._last_results = (result["energy"], result.get("forces"), result.get("energies"))
        return result

    def prepare(self, batch: Batch) -> Batch:
        """Rebuild the view when any rank's needs it (collective: one all-reduce of the
        status); returns the owned rows. Raises `NonFiniteError` on every rank when any
        rank's positions, or the forces or energy of the last evaluation, are NaN or
        infinite."""
        owned = self.owned_rows(batch)
        if self._rebuild_needed(owned):
            owned = self.moved_rows(batch)
            self.rebuild(owned)
        return owned

    def status(
        self, owned: Batch, last: tuple[torch.Tensor | None, ...] = _NO_RESULTS
    ) -> torch.Tensor:
        """This rank's status word (0-d float32 on the device, no host synchronisation):
        `NON_FINITE` when `owned`'s positions or the `last` results (energy, forces,
        per-atom energies) are NaN or infinite, else `REBUILD` when the view is stale for
        them (`view_stale`) or the last forward needed more edge slots than a captured one
        keeps (`PairCapacity.overflow`), else 0. Ranks agree on the largest
        (`agreed_status`); a captured step is kept only where it is 0."""
        energy, *per_atom = last
        positions = owned.positions.detach()
        non_finite = any_non_finite(positions, energy, tuple(per_atom))
        stale = self.view_stale(owned)
        overflow = self.engine.runner.edge_slots.overflow
        if overflow is not None:
            stale = stale | overflow
        return torch.where(non_finite, float(NON_FINITE), stale.to(torch.float32))

    def view_stale(self, owned: Batch) -> torch.Tensor:
        """0-d bool on the device: the view may miss a pair of `owned` within the cutoff (an
        atom moved more than the threshold, the cell changed)."""
        return self.domain.verlet.stale(owned.positions.detach(), owned.cell[0])

    def ghost_rows(self, view: HaloView, leaf: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Every row's position from the owned ones (`leaf`): ghosts from their owners
        through `copy_to_ghosts`, so gradients reaching ghosts flow back to them."""
        return view.positions(leaf, cell, self.comm)

    def wanted(self, properties: Iterable[str]) -> Wanted:
        """What of `properties` the engine derives by autograd (`Wanted.of`)."""
        return Wanted.of(self.engine.model, properties)

    def _rebuild_needed(self, owned: Batch) -> bool:
        status = agreed_status(self.comm, self.status(owned, self._last_results))
        if status == NON_FINITE:
            _, forces, energies = self._last_results
            kinds = non_finite_kinds(energies, forces, owned.positions.detach())
            raise non_finite_error(self.comm, owned.global_ids, kinds)
        return status == REBUILD

    def rebuild(self, owned: Batch) -> None:
        """Build the view of `owned` (this rank's atoms at their current positions) and have
        the engine re-decide what it may skip for that view (collective). Every rebuild,
        a restored checkpoint's included, comes through here."""
        self.domain.build(owned)
        self.engine.rebuilt(owned.cell[0], owned.pbc[0])
        self._last_results = _NO_RESULTS

    def owners(self, positions: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Owning rank of each position of the full system for the current cell."""
        return self.domain.owners(positions, cell)

    @property
    def rebuilds(self) -> int:
        """Views built so far."""
        return self.domain.rebuilds

    def _evaluate(self, owned: Batch, properties: Iterable[str]) -> dict[str, torch.Tensor]:
        """The model on the current view, whose owned rows are `owned`'s atoms (`ghost_rows`
        gives every row's position)."""
        view = self.domain.view
        wanted = self.wanted(properties)
        leaf = owned.positions.detach().requires_grad_(wanted.forces or wanted.heat_flux)
        with torch.enable_grad():
            rows = self.ghost_rows(view, leaf, owned.cell[0].detach())
        with computing(self.comm, leaf.device), asking_for(properties):
            cell, pbc = owned.cell, owned.pbc
            return self.engine.evaluate(view, leaf, rows, cell, pbc, wanted, self.placement)

    # -- evaluations captured as CUDA graphs (`FixedShapeEvaluator`) -----------------------
    def graph_token(self, batch: Batch) -> tuple[int, int, int] | None:
        """The current view's identity when an evaluation may be captured now, else None:
        graphs are on (`config.cuda_graphs`) and the next forward is not the checked one
        (the first after a rebuild runs eagerly). It changes at every rebuild and when the
        capacity of the edge slots a forward keeps grows (`PairCapacity`)."""
        runner = self.engine.runner
        if self.config.cuda_graphs is not True or runner.checking:
            return None
        return (self.domain.rebuilds, id(self.domain.view), runner.edge_slots.version)

    def graphs_required(self) -> bool:
        """Whether `cuda_graphs=True` was asked for (not "auto")."""
        return self._graphs_required

    def stale_for(self, batch: Batch) -> torch.Tensor:
        """0-d bool on the device, no host synchronisation: this rank's `status` word of
        `batch`'s owned rows is not 0 (a captured step's result is then dropped). One rank
        only: a mesh would all-reduce it."""
        return self.status(self.owned_rows(batch)) != 0

    def evaluate_fixed(
        self, batch: Batch, properties: Iterable[str] = _DEFAULT_PROPERTIES
    ) -> dict[str, torch.Tensor]:
        """`forward` on the current view without the rebuild check (no host
        synchronisation: what a captured step runs; `stale_for` decides whether its result
        is kept)."""
        return self._evaluate(self.owned_rows(batch), properties)

    def replayed(
        self,
        calls: Callable[..., Any],
        batch: Any,
        properties: frozenset[str],
        inputs: tuple[torch.Tensor, ...],
        holds: Hashable = None,
    ) -> dict[str, torch.Tensor] | None:
        """`properties` of `batch` from a replay of the fixed-shape evaluation through
        `calls` (a front end's `ReplayedCalls`), or None: no graph may be captured now
        (`graph_token`), or the replay's rows need a rebuild or its results are not finite
        (the caller then evaluates eagerly, rebuilding as any eager call would). `inputs`:
        the tensors of `batch` that change between calls, written into the captured ones;
        `holds`: what else the capture reads that a new call may bring (a new one is a
        new capture)."""
        if self.graph_token(batch) is None:
            return None

        def evaluate() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
            results = self.evaluate_fixed(batch, properties)
            stale = self.stale_for(batch)  # after the evaluation, which may flag too
            broken = ~torch.isfinite(results["energy"].sum() + results["forces"].sum())
            return results, stale | broken

        def key() -> tuple[Any, ...]:
            return self.graph_token(batch), properties, holds

        replayed = calls(key, inputs, evaluate, self.graphs_required())
        return None if replayed is None else dict(replayed)

    def check_finite(self, batch: Batch) -> None:
        """Raise `NonFiniteError` on every rank if any rank's positions, or the last forces
        or energy, are NaN or infinite (collective; `prepare` does this every step)."""
        self._rebuild_needed(self.owned_rows(batch))


class DistributedModel(SubdomainModel):
    """Wrap a model wrapper so its forward runs on this rank's owned + ghost atoms, each rank
    holding only its own atoms, which migrate between ranks (the `DomainParallel` layout).

    The model's `distribution_spec(strategy)` says how: during the forward every
    node-indexed scatter is halo-refreshed, node -> system sums keep owned rows only, and
    adapted ops get their transforms. Energy is the sum of the owned per-atom energies,
    all-reduced; forces and stress are derivatives of this rank's owned partial (never of
    the all-reduced total), with ghost contributions summed back to their owners.

    `forward(owned, properties)` takes this rank's atoms (`owned`, with global_ids); at a
    rebuild they migrate between ranks (the per-atom fields of `owned` are replaced in
    place), and results are for the owned atoms in `owned`'s current order.

    Args:
        model: a `BaseModelMixin` wrapper with per-atom "energies" output.
        config: the `DomainConfig` (cutoff must cover the model's).
        mesh: communicator; default `config.mesh`.
    """

    uses_batch_neighbors = False  # the halo view carries its own list (see `compute_view`)

    def owned_rows(self, owned: Batch) -> Batch:
        """`owned` itself: each rank holds only its own atoms."""
        if "global_ids" not in owned:
            raise ValueError("owned batches need global_ids (DomainParallel.partition adds them)")
        return owned

    def moved_rows(self, owned: Batch) -> Batch:
        """`owned` after its atoms migrated to their owners (its per-atom fields replaced
        in place; collective)."""
        self.domain.migrate(owned)
        return owned

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
