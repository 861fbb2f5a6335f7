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
        owned_centre = self.pair_i < self.nlocal
        to_ghost = owned_centre & (self.pair_j >= self.nlocal)
        parts = [
            (self.pair_i[owned_centre], self.pair_j[owned_centre], self.rij[owned_centre]),
            (self.pair_j[to_ghost], self.pair_i[to_ghost], -self.rij[to_ghost]),
        ]
        if ghost_pairs:
            between_ghosts = ~owned_centre & (self.pair_j >= self.nlocal)
            parts.append(
                (
                    self.pair_i[between_ghosts],
                    self.pair_j[between_ghosts],
                    self.rij[between_ghosts],
                )
            )
        i = np.concatenate([p[0] for p in parts])
        j = np.concatenate([p[1] for p in parts])
        vectors = np.concatenate([p[2] for p in parts])
        return np.stack([i, j]), vectors


@dataclass(frozen=True)
class RowResults:
    """A model's results on every row of `LocalRows`.

    Attributes:
        energies: (ntotal,) per-atom energies, eV (complete on owned rows; ghosts 0).
        forces: (ntotal, 3) eV/Å; a ghost row holds the force its owner still has to receive
            (LAMMPS's reverse communication adds it), so sum(x * f) over rows is the virial.
    """

    energies: np.ndarray
    forces: np.ndarray
