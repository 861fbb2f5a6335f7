"""Fallback mode (no LAMMPS handle): every rank runs the plain model on all its rows, no
exchange, and keeps the owned atoms' energies.

ML-IAP gives pair vectors but no positions, so row positions are rebuilt from them. The owned
energies are exact when every row within `n_layers - 1` hops of an owned atom has all its
neighbours on the rank: a ghost shell of `n_layers x cutoff` (`comm_modify cutoff`, plus the
neighbour skin) with pairs listed around ghosts too (`pair_style mliap unified <file> 1`).
The shell width cannot be read without the handle; only a missing ghost list is detected.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

from lammps_interface.rows import LocalRows, RowResults
from nvdd_plugins import Batch
from nvdd_plugins.models import BaseModelMixin, new_pair_leaf, pair_gradients_of

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
    """Evaluate a model on one rank's rows alone (redundant ghost-shell compute).

    Args:
        model: the nvdd model wrapper.
        dtype: dtype the model computes in.
        n_layers: message-passing layers of the model (1 for pair potentials).
    """

    def __init__(self, model: BaseModelMixin, dtype: torch.dtype, n_layers: int) -> None:
        self.model = model
        self.dtype = dtype
        self.n_layers = n_layers

    def evaluate(self, rows: LocalRows, pair_forces: bool = False) -> RowResults:
        """Energies (owned rows) and forces (-d E_owned / d x_row) of every row, and with
        `pair_forces` the force (d E_owned / d rij) of every listed pair."""
        energies = np.zeros(rows.ntotal)
        forces = np.zeros((rows.ntotal, 3))
        no_pair_forces = np.zeros((rows.pair_i.size, 3)) if pair_forces else None
        if rows.nlocal == 0:
            return RowResults(energies, forces, no_pair_forces)
        self._check_ghost_list(rows)
        edges, vectors = rows.edges(ghost_pairs=True)
        positions = torch.from_numpy(positions_from_pairs(rows.ntotal, edges, vectors))
        leaf = positions.to(self.dtype).requires_grad_()
        pairs = new_pair_leaf(edges.shape[1], leaf) if pair_forces else None
        shifts = torch.zeros(edges.shape[1], 3, dtype=self.dtype)
        batch = Batch(
            node={"positions": leaf, "atomic_numbers": torch.from_numpy(rows.numbers)},
            edge={
                "edge_index": torch.from_numpy(edges),
                "shifts": shifts if pairs is None else shifts + pairs,
            },
            system={
                "cell": torch.zeros(1, 3, 3, dtype=self.dtype),
                "pbc": torch.zeros(1, 3, dtype=torch.bool),
            },
            ptr=torch.tensor([0, rows.ntotal]),
        )
        inputs = [leaf] if pairs is None else [leaf, pairs]
        gradients = [None] * len(inputs)  # stay None when no pair reaches an owned atom
        with torch.enable_grad():
            owned = self.model(batch)["energies"][: rows.nlocal]
            if owned.requires_grad:
                gradients = torch.autograd.grad(owned.sum(), inputs, allow_unused=True)
        energies[: rows.nlocal] = owned.detach().to(torch.float64).numpy()
        if gradients[0] is not None:
            forces[:] = -gradients[0].to(torch.float64).numpy()
        if pairs is None:
            return RowResults(energies, forces)
        if gradients[0] is None:
            return RowResults(energies, forces, no_pair_forces)
        edge_gradients = pair_gradients_of(gradients[1], pairs, self.model)
        edge_gradients = edge_gradients.detach().to(torch.float64).numpy()
        return RowResults(energies, forces, rows.pair_forces(edge_gradients, ghost_pairs=True))

    def _check_ghost_list(self, rows: LocalRows) -> None:
        touches_ghost = bool((rows.pair_j[rows.pair_i < rows.nlocal] >= rows.nlocal).any())
        if self.n_layers > 1 and touches_ghost and not rows.has_ghost_centres:
            raise RuntimeError(
                f"fallback mode with a {self.n_layers}-layer model needs the pairs around ghost "
                "atoms: use `pair_style mliap unified <file> 1` (ghostneigh) and "
                f"`comm_modify cutoff` >= {self.n_layers} x {self.model.cutoff} Å + skin, or "
                "attach the LAMMPS handle (see lammps_interface.attach)"
            )
