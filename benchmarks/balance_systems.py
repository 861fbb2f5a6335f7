"""The inhomogeneous Cu systems of `balance.py`: a slab in vacuum, a particle off-centre, a
liquid next to its vapour, an open octahedron, and a droplet spreading on a surface."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from ase import Atoms
from ase.build import bulk, fcc100, fcc111
from ase.cluster import Octahedron
from ase.md.velocitydistribution import thermalize_momenta


def _thermal(atoms: Atoms, kelvin: float, seed: int) -> Atoms:
    rng = np.random.default_rng(seed)
    atoms.positions += rng.normal(scale=0.05, size=atoms.positions.shape)
    thermalize_momenta(atoms, temperature_K=kelvin, rng=rng)
    return atoms


def slab(side: int = 12) -> Atoms:
    """Cu(111), side x side x 8 layers, 30 Å of vacuum above it, periodic."""
    atoms = fcc111("Cu", size=(side, side, 8), vacuum=15.0, periodic=True)
    atoms.positions[:, 2] -= atoms.positions[:, 2].min() - 1.0
    return _thermal(atoms, 300, 1)


def particle() -> Atoms:
    """A Cu sphere (radius 16 Å) off-centre in a periodic 50 Å box."""
    crystal = bulk("Cu", "fcc", a=3.61, cubic=True) * (10, 10, 10)
    centre = crystal.cell.diagonal() / 2
    keep = np.linalg.norm(crystal.positions - centre, axis=1) < 16.0
    atoms = Atoms("Cu" * int(keep.sum()), crystal.positions[keep] - centre + 17.0)
    atoms.set_cell([50.0, 50.0, 50.0])
    atoms.pbc = True
    return _thermal(atoms, 300, 2)


def liquid_vapour() -> Atoms:
    """A periodic 29 x 29 x 87 Å box: the middle third dense at 1500 K, the rest vapour at
    1/20 of its density (random lattice sites)."""
    crystal = bulk("Cu", "fcc", a=3.61, cubic=True) * (8, 8, 24)
    z = crystal.positions[:, 2] / crystal.cell[2, 2]
    rng = np.random.default_rng(3)
    keep = ((z > 1 / 3) & (z < 2 / 3)) | (rng.random(len(crystal)) < 0.05)
    return _thermal(crystal[keep], 1500, 3)


def octahedron() -> Atoms:
    """A Cu octahedron (1469 atoms), open boundaries, no cell."""
    atoms = Octahedron("Cu", length=13, latticeconstant=3.61)
    atoms.set_cell(np.zeros((3, 3)))
    atoms.pbc = False
    return _thermal(atoms, 300, 4)


def droplet() -> Atoms:
    """A hemispherical Cu droplet (radius 13 Å) on a 4-layer Cu(100) surface, its atoms
    moving outward along the surface at up to 0.03 Å/fs (it spreads during the run)."""
    surface = fcc100("Cu", size=(16, 16, 4), vacuum=20.0, periodic=True)
    crystal = bulk("Cu", "fcc", a=3.61, cubic=True) * (8, 8, 4)
    centre = np.array([*(crystal.cell.diagonal()[:2] / 2), 0.0])
    offset = crystal.positions - centre
    keep = np.linalg.norm(offset, axis=1) < 13.0
    top = surface.positions[:, 2].max() + 1.8
    lateral = surface.cell.diagonal()[:2] / 2
    place = offset[keep] + np.array([*lateral, top])
    atoms = _thermal(surface + Atoms("Cu" * int(keep.sum()), place), 300, 5)
    radial = place - np.array([*lateral, top])
    radial[:, 2] = 0.0
    velocities = atoms.get_velocities()  # ASE units: 1 Å/fs = 10.1805
    velocities[len(surface) :] += 0.03 * 10.1805 * radial / 13.0
    atoms.set_velocities(velocities)
    return atoms


SYSTEMS: dict[str, Callable[[], Atoms]] = {
    "slab": slab,
    "particle": particle,
    "liquid_vapour": liquid_vapour,
    "octahedron": octahedron,
    "droplet": droplet,
}
