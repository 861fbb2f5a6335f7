"""Fallback mode (no LAMMPS handle): every rank runs the plain model on all its rows, no
exchange, and keeps the owned atoms' energies.

ML-IAP gives pair vectors but no positions, so row positions are rebuilt from them. The owned
energies are exact when every row within `n_layers - 1` hops of an owned atom has all its
neighbours on the rank: a ghost shell of `n_layers x cutoff` (`comm_modify cutoff`, plus the
neighbour skin) with pairs listed around ghosts too (`pair_style mliap unified <file> 1`).
The shell width cannot be read without the handle; only a missing ghost list is detected.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

from lammps_interface.messages import notify, world
from lammps_interface.rows import LocalRows, RowResults
from nvdd_plugins.comm import LocalCommunicator, MPICommunicator, Staging
from nvdd_plugins.distributed_model import PAIR_GRADIENTS, GivenRows, GivenRowsModel, ThickShell
from nvdd_plugins.models import BaseModelMixin

__all__ = ["RedundantBridge", "positions_from_pairs"]


def positions_from_pairs(n_rows: int, edges: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Row positions consistent with the pair vectors: x_j = x_i + r_ij along the pair graph.

    Each connected component is placed with its lowest row at the origin (pair vectors fix
    positions only up to one translation per component, which no energy depends on).
    `edges` (2, E) must hold every pair of a component in at least one direction.
    """
    src = np.concatenate([edges[0], edges[1]])
    dst = np.concatenate([edges[1], edges[0]])
    steps = np.concatenate([vectors, -vectors])
    graph = coo_array((np.ones(src.size), (src, dst)), shape=(n_rows, n_rows))
    _, labels = connected_components(graph, directed=False)
    _, roots = np.unique(labels, return_index=True)
    positions = np.zeros((n_rows, 3))
    known = np.zeros(n_rows, dtype=bool)
    known[roots] = True
    while True:
        frontier = np.flatnonzero(known[src] & ~known[dst])
        if frontier.size == 0:
            return positions
        targets, first = np.unique(dst[frontier], return_index=True)
        chosen = frontier[first]
        positions[targets] = positions[src[chosen]] + steps[chosen]
        known[targets] = True


class RedundantBridge:
    """Evaluate a model on one rank's rows alone: LAMMPS's layout (`GivenRowsModel`) with a
    thick ghost shell, so nothing is exchanged and the shell is computed redundantly.

    Args:
        model: the nvdd model wrapper (on `staging`'s device).
        dtype: dtype the model computes in.
        n_layers: message-passing layers of the model (1 for pair potentials).
        staging: the host buffers of the model's device (default: the CPU).

    Attributes:
        comm: LAMMPS's ranks (MPI's world), for the collective check of the results.
    """

    def __init__(
        self,
        model: BaseModelMixin,
        dtype: torch.dtype,
        n_layers: int,
        staging: Staging | None = None,
    ) -> None:
        self.model = model
        self.dtype = dtype
        self.n_layers = n_layers
        self.staging = staging if staging is not None else Staging(torch.device("cpu"))
        self.comm = MPICommunicator(world())
        self._layout: GivenRowsModel | None = None
        self._warned_no_pairs = False

    def evaluate(self, rows: LocalRows, pair_forces: bool = False) -> RowResults:
        """Energies (owned rows) and forces (-d E_owned / d x_row) of every row, and with
        `pair_forces` the force (d E_owned / d rij) of every listed pair."""
        if rows.nlocal == 0:
            no_pair_forces = np.zeros((rows.pair_i.numel(), 3)) if pair_forces else None
            no_rows = np.zeros(rows.ntotal), np.zeros((rows.ntotal, 3))
            return RowResults(*no_rows, finite=True, pair_forces=no_pair_forces)
        self._check_ghost_list(rows)
        self._warn_if_no_pairs(rows)
        edges, vectors = rows.edges(ghost_pairs=True)
        assert vectors is not None, "the fallback needs the rows' pair vectors"
        host_positions = positions_from_pairs(
            rows.ntotal, edges.cpu().numpy(), vectors.cpu().numpy()
        )
        positions = self.staging.to_device("positions", host_positions).to(self.dtype)
        layout = self._layout_for(rows)
        ids = torch.arange(rows.ntotal, device=positions.device)
        no_cell = positions.new_zeros(1, 3, 3)
        wanted = ("energy", "energies", "forces") + ((PAIR_GRADIENTS,) if pair_forces else ())
        out = layout(GivenRows(rows.nlocal, positions, rows.numbers, ids, no_cell, edges), wanted)
        return RowResults.of(out, rows, self.staging, ghost_pairs=True if pair_forces else None)

    def _layout_for(self, rows: LocalRows) -> GivenRowsModel:
        if self._layout is None:
            padding = int(rows.numbers[0])
            shell = ThickShell(self.n_layers)
            self._layout = GivenRowsModel(self.model, LocalCommunicator(), padding, shell=shell)
        return self._layout

    def _warn_if_no_pairs(self, rows: LocalRows) -> None:
        """Say once when ML-IAP lists no pair at all around this rank's atoms: then every atom
        is computed as isolated, right for a dilute gas, silently wrong when the input's
        `neigh_modify exclude` emptied the list (this mode sees only ML-IAP's pairs)."""
        if self._warned_no_pairs or rows.pair_i.numel() > 0 or rows.nlocal < 2:
            return
        self._warned_no_pairs = True
        notify(
            f"fallback mode: ML-IAP lists no pairs around this rank's {rows.nlocal} atoms, so "
            "each is computed as an isolated atom. If the input has `neigh_modify exclude`, "
            "these results are wrong: remove it, or attach the LAMMPS handle (halo mode lists "
            "its own pairs)",
            logging.WARNING,
            every_rank=True,
        )

    def _check_ghost_list(self, rows: LocalRows) -> None:
        touches_ghost = bool((rows.pair_j[rows.pair_i < rows.nlocal] >= rows.nlocal).any())
        if self.n_layers > 1 and touches_ghost and not rows.has_ghost_centres:
            raise RuntimeError(
                f"fallback mode with a {self.n_layers}-layer model needs the pairs around ghost "
                "atoms: use `pair_style mliap unified <file> 1` (ghostneigh) and "
                f"`comm_modify cutoff` >= {self.n_layers} x {self.model.cutoff} Å + skin, or "
                "attach the LAMMPS handle (see lammps_interface.attach)"
            )
