"""Small real-material systems for the pretrained models (SevenNet-0, CHGNet): MgO in the
shapes the exactness tests need, a few tens of atoms each."""

from __future__ import annotations

import itertools

import numpy as np
from ase import Atoms
from ase.build import bulk

MGO_A = 4.21  # Å, rocksalt MgO near its experimental lattice constant


def _rattled(atoms: Atoms, seed: int, scale: float = 0.05) -> Atoms:
    atoms.positions += np.random.default_rng(seed).normal(scale=scale, size=atoms.positions.shape)
    return atoms


def mgo_triclinic(seed: int = 0) -> Atoms:
    """16 atoms: the rhombohedral (60°) primitive cell of MgO x 2 in each direction, its
    widths (~4.9 Å) below twice any model's cutoff."""
    return _rattled(bulk("MgO", "rocksalt", a=MGO_A) * (2, 2, 2), seed)


def mgo_bulk(seed: int = 1) -> Atoms:
    """64 atoms: 2 x 2 x 2 conventional cubic cells (8.4 Å)."""
    return _rattled(bulk("MgO", "rocksalt", a=MGO_A, cubic=True) * (2, 2, 2), seed)


def mgo_slab(seed: int = 2) -> Atoms:
    """32 atoms: a two-layer MgO(001) slab, periodic in-plane, 12 Å of vacuum along z
    (pbc z off)."""
    atoms = bulk("MgO", "rocksalt", a=MGO_A, cubic=True) * (2, 2, 1)
    atoms.center(vacuum=6.0, axis=2)
    atoms.pbc = (True, True, False)
    return _rattled(atoms, seed)


def mgo_cluster(seed: int = 3) -> Atoms:
    """27 ions: a 3 x 3 x 3 rocksalt cube (Mg on even sites) in vacuum, without a cell."""
    sites = np.array(list(itertools.product(range(3), repeat=3)))
    symbols = ["Mg" if s.sum() % 2 == 0 else "O" for s in sites]
    atoms = Atoms(symbols, positions=sites * MGO_A / 2, pbc=False)
    return _rattled(atoms, seed)


MATERIALS = {
    "triclinic": mgo_triclinic,
    "slab": mgo_slab,
    "cluster": mgo_cluster,
    "bulk": mgo_bulk,
}


def mgo_rod(seed: int = 4) -> Atoms:
    """81 ions: a 9 x 3 x 3 rocksalt rod (17 Å long along x) in vacuum, without a cell: cut
    in two across x, each half's 6 Å and 12 Å ghost shells hold different atoms."""
    sites = np.array(list(itertools.product(range(9), range(3), range(3))))
    symbols = ["Mg" if s.sum() % 2 == 0 else "O" for s in sites]
    return _rattled(Atoms(symbols, positions=sites * MGO_A / 2, pbc=False), seed)
