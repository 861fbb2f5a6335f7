"""`GivenRowsModel`: the layout of a front end that hands over each rank's rows itself.

LAMMPS holds, on each rank, its owned atoms and their ghosts at image positions, with global
ids and its own pair list; nvdd builds the padded view, the ghost -> owner plan by ids and,
when the front end hands over no pairs, a Verlet list of its rows that is kept (the same
view, the same tensors) until the row layout changes or a row moved more than half the
skin. Per-atom results cover every local row: a ghost row's forces are owed to its owner,
which the front end's reverse communication adds.
"""

from __future__ import annotations

import torch

from nvdd_plugins.comm import Communicator, HaloPlan
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.distributed_model.evaluation.derivatives import Wanted
from nvdd_plugins.distributed_model.evaluation.engine import HaloEngine
from nvdd_plugins.distributed_model.evaluation.health import REBUILD, agreed_status
from nvdd_plugins.distributed_model.evaluation.results import PartialRows
from nvdd_plugins.distributed_model.evaluation.shells import Shell, ThickShell
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.distributed_model.rows.view_build import Padding, ViewRows, padded_view
from nvdd_plugins.geometry import VerletState, build_neighbor_list
from nvdd_plugins.models import BaseModelMixin

__all__ = ["CAPACITY_GROWTH", "GivenRowsModel"]

CAPACITY_GROWTH = 1.05
"""Padded row and edge-slot counts grow by this factor when exceeded, rather than following
the front end's counts exactly: LAMMPS's ghost count changes at every reneighbouring, and
cuEquivariance's kernels tune themselves anew for every new row count (seconds per tuning
at 10^5 atoms on an H200, against 0.1 s for the step)."""


class GivenRowsModel:
    """Evaluate a model on rows laid out by a front end: owned rows, then ghosts at their
    image positions (no periodic axis is wrapped: every pair is explicit).

    Args:
        model: a `BaseModelMixin` wrapper with per-atom "energies" and autograd forces.
        comm: this rank's communicator (the front end's).
        padding_species: atomic number of padding rows (one the model knows).
        skin: Verlet skin (Å) of the pairs listed here when the front end gives none.
        shell: `PerLayerRefresh()` (default: ghost rows refreshed from their owners per
            layer), or `ThickShell(n_layers)` when the rows hold every owned atom's
            receptive field and the pairs among ghosts (no exchange; ghost forces owed).
        fixed_shapes: views as a CUDA graph replays them (`DomainConfig.fixed_shapes`:
            capacities that grow, empty pair slots holding padding pairs, no filtering on
            the host), for a front end that replays its model calls.
    """

    def __init__(
        self,
        model: BaseModelMixin,
        comm: Communicator,
        padding_species: int,
        skin: float = 0.0,
        shell: Shell | None = None,
        fixed_shapes: bool = False,
    ) -> None:
        self.comm = comm
        config = DomainConfig(cutoff=model.cutoff, cuda_graphs=fixed_shapes)
        self.engine = HaloEngine(model, config, comm, shell)
        self.padding_species = int(padding_species)
        # the halo plan follows the front end's row layout (owned count and ids)
        self.verlet = VerletState(growth=CAPACITY_GROWTH)
        self._plan: HaloPlan | None = None
        self.skin = float(skin)
        self._listed = VerletState(self.skin)
        self._listed_view: HaloView | None = None

    def view(
        self,
        n_owned: int,
        positions: torch.Tensor,
        numbers: torch.Tensor,
        ids: torch.Tensor,
        pairs: torch.Tensor | None = None,
    ) -> HaloView:
        """The padded view of the local rows (`n_owned` owned first, then ghosts; their
        `positions`, atomic `numbers` and global `ids`) and their `pairs` (2, E) of local row
        indices; without `pairs`, the pairs within cutoff + skin touching an owned row, and
        the view of the last call while that list still holds every pair within the cutoff
        (so the model sees the same graph from step to step, as under `DomainParallel`).
        Collective: the halo plan is rebuilt on every rank when any rank's row layout
        changed, since an owner's new row order invalidates its peers' plans too."""
        plan = self._plan_for(n_owned, ids)
        if pairs is not None:
            return self._assemble(plan, positions, numbers, ids, pairs)
        held = self._listed_view
        if held is None or held.plan is not plan or self._listed.stale(positions):
            radius = self.engine.config.cutoff + self.skin
            listed = build_neighbor_list(positions, None, (False,) * 3, radius, touching=n_owned)
            held = self._assemble(plan, positions, numbers, ids, listed.edge_index)
            self._listed_view = held
            self._listed.record(positions)
        return held

    def _assemble(
        self,
        plan: HaloPlan,
        positions: torch.Tensor,
        numbers: torch.Tensor,
        ids: torch.Tensor,
        pairs: torch.Tensor,
    ) -> HaloView:
        capacities = (self.verlet.rows.fit, self.verlet.pairs.fit)
        config = self.engine.config
        padding = Padding(self.padding_species, config.cutoff, *capacities, config.fixed_shapes)
        return padded_view(ViewRows(plan, positions, numbers, ids, pairs), padding)

    def _plan_for(self, n_owned: int, ids: torch.Tensor) -> HaloPlan:
        if isinstance(self.engine.shell, ThickShell):  # rows only: nothing is exchanged
            nothing = torch.empty(0, dtype=torch.long, device=ids.device)
            return HaloPlan(n_owned, ids.shape[0], *(nothing,) * 4)
        # compared where the ids are (no host pass over them at each step)
        layout = torch.cat([ids.new_tensor([n_owned]), ids]).long()
        if agreed_status(self.comm, self.verlet.stale(None, ids=layout)) == REBUILD:
            self._plan = HaloPlan.from_global_ids(self.comm, ids[:n_owned], ids[n_owned:])
            self.verlet.record(None, ids=layout)
            # as after a DomainParallel rebuild, the next forward is checked and its plan
            # decided afresh (a rank may now own no atoms); the rows are an open frame
            device = ids.device
            self.engine.rebuilt(
                torch.zeros(3, 3, device=device), torch.zeros(3, dtype=torch.bool, device=device)
            )
        assert self._plan is not None
        return self._plan

    def replay_key(self, view: HaloView) -> tuple[HaloView, int]:
        """What a captured call on `view` holds for: the view, and the capacity of the edge
        slots its forwards keep (`PairCapacity.version`)."""
        return view, self.engine.runner.edge_slots.version

    def overflowed(self) -> torch.Tensor | None:
        """0-d device flag, or None: the last call needed more edge slots than it kept, so
        its results (a replay's) must not be used."""
        return self.engine.runner.edge_slots.overflow

    def __call__(
        self,
        view: HaloView,
        positions: torch.Tensor,
        cell: torch.Tensor,
        pair_gradients: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Energy and forces with every local row's position given (collective).

        "energy" is this rank's owned partial (not summed over ranks). "forces" covers all
        local rows: on a ghost row, the contribution owed to its owner,
        so the rows also give the virial as sum(x * f). Forces come from autograd of the
        owned partial energy, so the model's energies must be differentiable. With
        `pair_gradients`, also "pair_gradients": this rank's share of dE/dr for each edge
        slot of the view, the pairs given first and in their order (the forces are their
        pair sums, so a front end can hand them to its own per-pair force and virial tally
        instead).
        """
        if positions.shape[0] != view.n_local:
            raise ValueError(f"expected {view.n_local} local positions, got {positions.shape[0]}")
        leaf = positions.detach().requires_grad_(True)
        with torch.enable_grad():
            rows = torch.cat([leaf, view.padding_positions.to(leaf.dtype)])
        pbc = torch.zeros(1, 3, dtype=torch.bool, device=positions.device)  # no host copy
        wanted = Wanted(forces=True, stress=False, stresses=pair_gradients)
        # the front end sums energies over ranks and ghost rows into owners itself
        return self.engine.evaluate(view, leaf, rows, cell, pbc, wanted, PartialRows())
