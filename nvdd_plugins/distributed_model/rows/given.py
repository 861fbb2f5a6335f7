"""`GivenDomain`: the row source of a front end that lays out each rank's rows itself.

LAMMPS holds, on each rank, its owned atoms and their ghosts at image positions, with global
ids and its own pair list (`GivenRows`). Nothing migrates and ghost positions are given, not
exchanged; the view keeps the ghost -> owner plan by ids and, when the front end hands over
no pairs, a Verlet list of its rows kept until the row layout changes or a row moved more
than half the skin.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvdd_plugins.comm import Communicator, HaloPlan
from nvdd_plugins.config import DomainConfig
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.distributed_model.rows.view_build import Padding, ViewRows, padded_view
from nvdd_plugins.geometry import VerletState, build_neighbor_list

__all__ = ["CAPACITY_GROWTH", "GivenDomain", "GivenRows"]

CAPACITY_GROWTH = 1.05
"""Padded row and edge-slot counts grow by this factor when exceeded, rather than following
the front end's counts exactly: LAMMPS's ghost count changes at every reneighbouring, and
cuEquivariance's kernels tune themselves anew for every new row count (seconds per tuning
at 10^5 atoms on an H200, against 0.1 s for the step)."""


@dataclass
class GivenRows:
    """One rank's rows as a front end lays them out: `n_owned` owned rows first, then ghosts
    at their image positions (no periodic axis is wrapped: every pair is explicit).

    Attributes:
        n_owned: owned rows, first.
        positions: (n_local, 3) every local row's position.
        atomic_numbers, global_ids: (n_local,) per row.
        cell: (1, 3, 3) the front end's box (the rows are an open frame).
        pairs: (2, E) local row indices of the pairs to evaluate, in their order, or None:
            the view lists the pairs within cutoff + skin touching an owned row.
    """

    n_owned: int
    positions: torch.Tensor
    atomic_numbers: torch.Tensor
    global_ids: torch.Tensor
    cell: torch.Tensor
    pairs: torch.Tensor | None = None

    @property
    def pbc(self) -> torch.Tensor:
        """(1, 3) no periodic axis, made on the device (no host copy)."""
        return torch.zeros(1, 3, dtype=torch.bool, device=self.positions.device)

    def layout(self) -> torch.Tensor:
        """The owned count and the ids: what the halo plan depends on."""
        return torch.cat([self.global_ids.new_tensor([self.n_owned]), self.global_ids]).long()


class GivenDomain:
    """The views of a front end's rows (`GivenRows`).

    Args:
        comm: this rank's communicator (the front end's).
        config: the `DomainConfig` (cutoff; `fixed_shapes`: views as a CUDA graph replays
            them).
        padding_species: atomic number of padding rows (one the model knows).
        skin: Verlet skin (Å) of the pairs listed here when the front end gives none.
        exchanges: ghost rows are refreshed from their owners (a halo plan by ids); False
            when the rows hold every owned atom's receptive field (nothing is exchanged).
    """

    def __init__(
        self,
        comm: Communicator,
        config: DomainConfig,
        padding_species: int,
        skin: float,
        exchanges: bool,
    ) -> None:
        self.comm, self.config = comm, config
        self.padding_species = int(padding_species)
        self.exchanges = exchanges
        self.skin = float(skin)
        self.verlet = VerletState(self.skin, growth=CAPACITY_GROWTH)
        self.view: HaloView | None = None
        self.rebuilds = 0
        self._plan: HaloPlan | None = None
        self._listed: HaloView | None = None  # the view of the pairs listed here

    def stale(self, rows: GivenRows) -> torch.Tensor:
        """0-d bool on the rows' device: the row layout changed since the last build, or a
        row moved more than half the skin since its pairs were listed here."""
        listed = rows.pairs is None and self._listed is not None
        positions = rows.positions.detach() if listed else None
        device = rows.positions.device
        return self.verlet.stale(positions, ids=rows.layout()).to(device)

    def build(self, rows: GivenRows) -> None:
        """The halo plan of the rows (collective: a new layout on one rank invalidates its
        peers' plans too); the call's view follows (`select`)."""
        ids = rows.global_ids
        if self.exchanges:
            self._plan = HaloPlan.from_global_ids(
                self.comm, ids[: rows.n_owned], ids[rows.n_owned :]
            )
        else:
            nothing = torch.empty(0, dtype=torch.long, device=ids.device)
            self._plan = HaloPlan(rows.n_owned, ids.shape[0], *(nothing,) * 4)
        self._listed = None
        self.verlet.record(None, ids=rows.layout())  # `select` adds positions when it lists
        self.rebuilds += 1

    def select(self, rows: GivenRows) -> HaloView:
        """The view of this call (rank-local): of the pairs given, else of the pairs listed
        here, listed anew when there are none yet."""
        if rows.pairs is not None:
            self.view = self._assemble(rows, rows.pairs)
            return self.view
        if self._listed is None:
            radius = self.config.cutoff + self.skin
            positions = rows.positions.detach()
            listed = build_neighbor_list(
                positions, None, (False,) * 3, radius, touching=rows.n_owned
            )
            self._listed = self._assemble(rows, listed.edge_index)
            self.verlet.record(positions, ids=rows.layout())
        self.view = self._listed
        return self.view

    def _assemble(self, rows: GivenRows, pairs: torch.Tensor) -> HaloView:
        assert self._plan is not None
        capacities = (self.verlet.rows.fit, self.verlet.pairs.fit)
        config = self.config
        padding = Padding(self.padding_species, config.cutoff, *capacities, config.fixed_shapes)
        positions = rows.positions.detach()
        given = ViewRows(self._plan, positions, rows.atomic_numbers, rows.global_ids, pairs)
        return padded_view(given, padding)
