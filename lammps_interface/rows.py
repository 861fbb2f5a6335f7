"""One ML-IAP call's rows and pairs as tensors on the model's device, and the per-row results
for LAMMPS.

LAMMPS lays rows out owned first (`nlocal`), then ghosts (`ntotal` in all). Its full
neighbour list holds a pair of two owned atoms in both directions but an owned-ghost pair
only as (owned, ghost); with `ghostneigh` it also holds pairs centred on ghosts. Models expect
every owned atom to see each neighbour in both directions, hence `LocalRows.edges`. The
pair arithmetic runs as whole-tensor operations on the device (no per-pair Python work).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nvdd_plugins.comm import Staging
from nvdd_plugins.distributed_model import PAIR_GRADIENTS

__all__ = ["LocalRows", "RowResults"]


@dataclass(frozen=True)
class LocalRows:
    """One rank's rows and pairs for one ML-IAP call (tensors on one device).

    Attributes:
        nlocal: owned rows (first).
        ntotal: owned + ghost rows.
        numbers: (ntotal,) atomic numbers.
        pair_i, pair_j: (npairs,) row indices of every listed pair (i the centre); empty
            when read without pairs.
        rij: (npairs, 3) x[pair_j] - x[pair_i], Å, float64; None when not asked for.
        list_rows: (host) rows of LAMMPS's per-atom energy slots (`data.eatoms[k]` is row
            `list_rows[k]`).
        listed_pairs: pairs ML-IAP listed for this call, read or not.
    """

    nlocal: int
    ntotal: int
    numbers: torch.Tensor
    pair_i: torch.Tensor
    pair_j: torch.Tensor
    rij: torch.Tensor | None
    list_rows: np.ndarray
    listed_pairs: int

    @classmethod
    def from_data(
        cls,
        data: Any,
        element_numbers: np.ndarray,
        staging: Staging | None = None,
        vectors: bool = True,
        pairs: bool = True,
    ) -> LocalRows:
        """Copy what is needed out of an ML-IAP `data` object onto `staging`'s device (the
        CPU by default); ML-IAP's pairs only with `pairs` (else none are read), their
        vectors only with `vectors` too.

        `element_numbers[k]` is the atomic number of ML-IAP element k. Arrays that LAMMPS
        leaves unallocated (no atoms, no pairs) are read as empty.
        """
        staging = staging if staging is not None else Staging(torch.device("cpu"))
        nlocal, ntotal, npairs = int(data.nlocal), int(data.ntotal), int(data.npairs)
        elems = np.asarray(data.elems) if ntotal else np.zeros(0, np.int32)
        if elems.size and int(elems.min()) < 0:
            raise ValueError(
                "an atom type is mapped to NULL in pair_coeff; the nvdd bridge needs every "
                "type mapped to an element of the model"
            )
        lookup = torch.as_tensor(element_numbers, dtype=torch.long, device=staging.device)
        numbers = lookup[staging.to_device("elems", elems).long()]
        rij = None
        if npairs and pairs:
            pair_i = staging.to_device("pair_i", np.asarray(data.pair_i)).long()
            pair_j = staging.to_device("pair_j", np.asarray(data.pair_j)).long()
            if vectors:
                rij = staging.to_device("rij", np.asarray(data.rij, dtype=np.float64))
        else:
            pair_i = pair_j = torch.zeros(0, dtype=torch.long, device=staging.device)
        if vectors and rij is None:
            rij = torch.zeros(0, 3, dtype=torch.float64, device=staging.device)
        nlist = int(data.nlistatoms)
        list_rows = (
            np.asarray(data.iatoms, dtype=np.int64)[:nlist] if nlist else np.zeros(0, np.int64)
        )
        return cls(nlocal, ntotal, numbers, pair_i, pair_j, rij, list_rows, npairs)

    @property
    def has_ghost_centres(self) -> bool:
        """True when the list includes pairs centred on ghosts (`ghostneigh` on)."""
        return bool((self.pair_i >= self.nlocal).any())

    def edges(self, ghost_pairs: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(2, E) row pairs and, when the rows hold pair vectors, their (E, 3) vectors
        x_j - x_i.

        Every pair touching an owned row appears in both directions exactly once; pairs
        between two ghosts are kept when `ghost_pairs` (as LAMMPS lists them, i.e. only
        with `ghostneigh`).
        """
        pairs, forward = self._edge_sources(ghost_pairs)
        i, j = self.pair_i[pairs], self.pair_j[pairs]
        edges = torch.stack([torch.where(forward, i, j), torch.where(forward, j, i)])
        if self.rij is None:
            return edges, None
        vectors = self.rij[pairs]
        return edges, torch.where(forward[:, None], vectors, -vectors)

    def pair_forces(self, edge_gradients: torch.Tensor, ghost_pairs: bool) -> torch.Tensor:
        """(npairs, 3) dE/drij of LAMMPS's pairs from dE/dr of the edges `edges(ghost_pairs)`
        gave, the first rows of `edge_gradients` (a reversed edge counts with the opposite
        sign; pairs no edge came from, e.g. those centred on a ghost with an owned neighbour,
        get 0): what `data.update_pair_forces` takes."""
        pairs, forward = self._edge_sources(ghost_pairs)
        edge_gradients = edge_gradients[: pairs.numel()]
        signed = torch.where(forward[:, None], edge_gradients, -edge_gradients)
        forces = edge_gradients.new_zeros(self.pair_i.numel(), 3)
        return forces.index_add_(0, pairs, signed)

    def _edge_sources(self, ghost_pairs: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """For each edge of `edges(ghost_pairs)`: the listed pair it comes from and whether
        it runs in the pair's direction (else reversed)."""
        owned_centre = self.pair_i < self.nlocal
        to_ghost = self.pair_j >= self.nlocal
        parts = [(owned_centre, True), (owned_centre & to_ghost, False)]
        if ghost_pairs:
            parts.append((~owned_centre & to_ghost, True))
        sources = [torch.nonzero(mask).flatten() for mask, _ in parts]
        pairs = torch.cat(sources)
        forward = torch.cat(
            [
                torch.full_like(s, f, dtype=torch.bool)
                for s, (_, f) in zip(sources, parts, strict=True)
            ]
        )
        return pairs, forward


@dataclass(frozen=True)
class RowResults:
    """A model's results on every row of `LocalRows`, on the host.

    Attributes:
        energies: (ntotal,) per-atom energies, eV (complete on owned rows; ghosts 0).
        forces: (ntotal, 3) eV/Å; a ghost row holds the force its owner still has to receive
            (LAMMPS's reverse communication adds it), so sum(x * f) over rows is the virial.
        finite: whether every owned row's energy and force is finite (checked on the
            model's device before the copy back, so no host pass over the rows is needed).
        pair_forces: when asked for, (npairs, 3) dE/drij of each listed pair, eV/Å, whose
            pair sums are `forces` (for `data.update_pair_forces`, which then also tallies
            LAMMPS's per-atom virials); else None.
    """

    energies: np.ndarray
    forces: np.ndarray
    finite: bool
    pair_forces: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        out: dict[str, torch.Tensor],
        rows: LocalRows,
        staging: Staging,
        ghost_pairs: bool | None = None,
    ) -> RowResults:
        """Results from a layout's outputs on `rows` ("energies" and "forces" of every row,
        on the model's device), each copied back in one copy, valid until the next call;
        with `ghost_pairs`, also the forces of the listed pairs from `PAIR_GRADIENTS` of the
        edges `rows.edges(ghost_pairs)` gave, the view's first."""
        per_row = torch.cat([out["energies"].unsqueeze(1), out["forces"]], dim=1)
        finite = torch.isfinite(per_row[: rows.nlocal]).all()
        host = staging.to_host("results", per_row.to(torch.float64))
        pairs = None
        if ghost_pairs is not None:
            forces = rows.pair_forces(out[PAIR_GRADIENTS].double(), ghost_pairs)
            pairs = staging.to_host("pair_forces", forces)
        return cls(host[:, 0], host[:, 1:], bool(finite), pairs)
