"""`GivenRowsModel`: the step over rows a front end lays out itself (LAMMPS's owned atoms and
their ghosts at image positions, `GivenRows`), placed as partials over every local row: a
ghost row's forces are owed to its owner, which the front end's reverse communication adds.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from nvdd_plugins.comm import Communicator
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.distributed_model.evaluation.derivatives import Wanted
from nvdd_plugins.distributed_model.evaluation.engine import HaloEngine
from nvdd_plugins.distributed_model.evaluation.results import PartialRows
from nvdd_plugins.distributed_model.evaluation.shells import Shell, ThickShell
from nvdd_plugins.distributed_model.layouts.model import SubdomainModel
from nvdd_plugins.distributed_model.rows.given import GivenDomain, GivenRows
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.models import BaseModelMixin

__all__ = ["PAIR_GRADIENTS", "GivenRowsModel"]

PAIR_GRADIENTS = "pair_gradients"
"""The property of this rank's share of dE/dr for each edge slot of the view, the pairs given
first and in their order (the forces are their pair sums, so a front end can hand them to its
own per-pair force and virial tally instead)."""


class GivenRowsModel(SubdomainModel):
    """Evaluate a model on rows laid out by a front end (`GivenRows`), collectively: the
    step's status all-reduce (the row layout changed, a listed pair went stale, NaN
    positions), the halo plan rebuilt on every rank when it says so, the evaluation.

    `forward(rows, properties)` returns "energy", this rank's owned partial (not summed over
    ranks), and "forces" over all local rows: on a ghost row, the contribution owed to its
    owner, so the rows also give the virial as sum(x * f). Forces come from autograd of the
    owned partial energy, so the model's energies must be differentiable; `PAIR_GRADIENTS`
    in `properties` adds this rank's dE/dr per edge slot.

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
            the host), for a front end that replays its model calls (`replayed`).
        graphs_required: a capture that fails raises (`cuda_graphs=True`), and every new
            view is captured even where replays do not pay.
    """

    def __init__(
        self,
        model: BaseModelMixin,
        comm: Communicator,
        padding_species: int,
        skin: float = 0.0,
        shell: Shell | None = None,
        fixed_shapes: bool = False,
        graphs_required: bool = False,
    ) -> None:
        nn.Module.__init__(self)
        self._graphs_required = graphs_required
        config = DomainConfig(cutoff=model.cutoff, cuda_graphs=fixed_shapes)
        engine = HaloEngine(model, config, comm, shell)
        exchanges = not isinstance(engine.shell, ThickShell)
        self.adopt(engine, GivenDomain(comm, config, padding_species, skin, exchanges))
        self.placement = PartialRows()  # the front end sums over ranks and into owners

    def owned_rows(self, rows: GivenRows) -> GivenRows:
        """The rows themselves: every local row's position is given."""
        return rows

    def moved_rows(self, rows: GivenRows) -> GivenRows:
        """The rows themselves: nothing migrates."""
        return rows

    def prepare(self, rows: GivenRows) -> GivenRows:
        """The status all-reduce and, when it says so, the rebuild (collective); then this
        call's view (`GivenDomain.select`)."""
        super().prepare(rows)
        self.domain.select(rows)
        return rows

    def view_stale(self, rows: GivenRows) -> torch.Tensor:
        """`GivenDomain.stale`: the cell of the open frame does not matter."""
        return self.domain.stale(rows)

    def ghost_rows(self, view: HaloView, leaf: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """Every row's position: the given ones (ghosts at their images), then padding."""
        return torch.cat([leaf, view.padding_positions.to(leaf.dtype)])

    def wanted(self, properties: Iterable[str]) -> Wanted:
        """Forces by autograd of the owned partial (ghost rows' owed to owners); pair
        gradients when asked for."""
        return Wanted(forces=True, stress=False, stresses=PAIR_GRADIENTS in properties)

    def stale_for(self, rows: GivenRows) -> torch.Tensor:
        """0-d bool on the device: the last forward needed more edge slots than a captured
        one keeps. The row layout and the listed pairs are checked before each call
        (`prepare`, outside a capture: the ids are compared on the host)."""
        overflow = self.engine.runner.edge_slots.overflow
        if overflow is None:
            return torch.zeros((), dtype=torch.bool, device=rows.positions.device)
        return overflow
