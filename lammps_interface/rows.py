"""One ML-IAP call's rows and pairs as numpy arrays, and the per-row results for LAMMPS.

LAMMPS lays rows out owned first (`nlocal`), then ghosts (`ntotal` in all). Its full
neighbour list holds a pair of two owned atoms in both directions but an owned-ghost pair
only as (owned, ghost); with `ghostneigh` it also holds pairs centred on ghosts. Models expect
every owned atom to see each neighbour in both directions, hence `LocalRows.edges`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LocalRows", "RowResults"]


@dataclass(frozen=True)
class LocalRows:
    """One rank's rows and pairs for one ML-IAP call.

    Attributes:
        nlocal: owned rows (first).
        ntotal: owned + ghost rows.
        numbers: (ntotal,) atomic numbers.
        pair_i, pair_j: (npairs,) row indices of every listed pair (i the centre).
        rij: (npairs, 3) x[pair_j] - x[pair_i], Å.
        list_rows: rows of LAMMPS's per-atom energy slots (`data.eatoms[k]` is row
            `list_rows[k]`).
    """

    nlocal: int
    ntotal: int
    numbers: np.ndarray
    pair_i: np.ndarray
    pair_j: np.ndarray
    rij: np.ndarray
    list_rows: np.ndarray

    @classmethod
    def from_data(cls, data: Any, element_numbers: np.ndarray) -> LocalRows:
        """Copy what is needed out of an ML-IAP `data` object.

        `element_numbers[k]` is the atomic number of ML-IAP element k. Arrays that LAMMPS
        leaves unallocated (no atoms, no pairs) are read as empty.
        """
        nlocal, ntotal, npairs = int(data.nlocal), int(data.ntotal), int(data.npairs)
        elems = np.asarray(data.elems, dtype=np.int64) if ntotal else np.zeros(0, np.int64)
        if elems.size and int(elems.min()) < 0:
            raise ValueError(
                "an atom type is mapped to NULL in pair_coeff; the nvdd bridge needs every "
                "type mapped to an element of the model"
            )
        if npairs:
            pair_i = np.asarray(data.pair_i, dtype=np.int64)
            pair_j = np.asarray(data.pair_j, dtype=np.int64)
            rij = np.array(data.rij, dtype=np.float64)
        else:
            pair_i = pair_j = np.zeros(0, np.int64)
            rij = np.zeros((0, 3))
        nlist = int(data.nlistatoms)
        list_rows = (
            np.asarray(data.iatoms, dtype=np.int64)[:nlist] if nlist else np.zeros(0, np.int64)
        )
        return cls(nlocal, ntotal, element_numbers[elems], pair_i, pair_j, rij, list_rows)

    @property
    def has_ghost_centres(self) -> bool:
        """True when the list includes pairs centred on ghosts (`ghostneigh` on)."""
        return bool((self.pair_i >= self.nlocal).any())

    def edges(self, ghost_pairs: bool) -> tuple[np.ndarray, np.ndarray]:
        """(2, E) row pairs and their (E, 3) vectors x_j - x_i.

        Every pair touching an owned row appears in both directions exactly once; pairs
        between two ghosts are kept when `ghost_pairs` (as LAMMPS lists them, i.e. only
        with `ghostneigh`).
        """
        pairs, forward = self._edge_sources(ghost_pairs)
        i = np.where(forward, self.pair_i[pairs], self.pair_j[pairs])
        j = np.where(forward, self.pair_j[pairs], self.pair_i[pairs])
        vectors = np.where(forward[:, None], self.rij[pairs], -self.rij[pairs])
        return np.stack([i, j]), vectors

    def pair_forces(self, edge_gradients: np.ndarray, ghost_pairs: bool) -> np.ndarray:
        """(npairs, 3) dE/drij of LAMMPS's pairs from dE/dr of the edges `edges(ghost_pairs)`
        gave (a reversed edge counts with the opposite sign; pairs no edge came from, e.g.
        those centred on a ghost with an owned neighbour, get 0): what
        `data.update_pair_forces` takes."""
        pairs, forward = self._edge_sources(ghost_pairs)
        forces = np.zeros((self.pair_i.size, 3))
        signed = np.where(forward[:, None], edge_gradients, -edge_gradients)
        np.add.at(forces, pairs, signed)
        return forces

    def _edge_sources(self, ghost_pairs: bool) -> tuple[np.ndarray, np.ndarray]:
        """For each edge of `edges(ghost_pairs)`: the listed pair it comes from and whether
        it runs in the pair's direction (else reversed)."""
        owned_centre = self.pair_i < self.nlocal
        to_ghost = owned_centre & (self.pair_j >= self.nlocal)
        parts = [(np.flatnonzero(owned_centre), True), (np.flatnonzero(to_ghost), False)]
        if ghost_pairs:
            parts.append((np.flatnonzero(~owned_centre & (self.pair_j >= self.nlocal)), True))
        pairs = np.concatenate([p for p, _ in parts])
        forward = np.concatenate([np.full(p.size, f) for p, f in parts])
        return pairs, forward


@dataclass(frozen=True)
class RowResults:
    """A model's results on every row of `LocalRows`.

    Attributes:
        energies: (ntotal,) per-atom energies, eV (complete on owned rows; ghosts 0).
        forces: (ntotal, 3) eV/Å; a ghost row holds the force its owner still has to receive
            (LAMMPS's reverse communication adds it), so sum(x * f) over rows is the virial.
        pair_forces: when asked for, (npairs, 3) dE/drij of each listed pair, eV/Å, whose
            pair sums are `forces` (for `data.update_pair_forces`, which then also tallies
            LAMMPS's per-atom virials); else None.
    """

    energies: np.ndarray
    forces: np.ndarray
    pair_forces: np.ndarray | None = None
