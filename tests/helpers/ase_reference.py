"""ASE's own integrators on the same LJ system, for single-process trajectory comparisons."""

from __future__ import annotations

import numpy as np
from ase import Atoms
from ase.calculators.lj import LennardJones
from ase.md.velocitydistribution import thermalize_momenta

from nvdd_plugins import Batch
from tests.helpers.systems import LJ_CUTOFF, LJ_EPSILON, LJ_SIGMA, triclinic_bulk


def ase_lj(atoms: Atoms) -> Atoms:
    """A copy of `atoms` with ASE's LennardJones (the parameters of `lj_model()`)."""
    atoms = atoms.copy()
    atoms.calc = LennardJones(epsilon=LJ_EPSILON, sigma=LJ_SIGMA, rc=LJ_CUTOFF)
    return atoms


def warm_bulk(temperature: float = 300.0, seed: int = 1) -> Atoms:
    """`triclinic_bulk` with Maxwell-Boltzmann velocities at `temperature` K."""
    atoms = triclinic_bulk()
    thermalize_momenta(atoms, temperature_K=temperature, rng=np.random.default_rng(seed))
    return atoms


def deviation(batch: Batch, atoms: Atoms) -> dict[str, float]:
    """Largest absolute differences of positions (Å), velocities and cell (Å)."""
    return {
        "positions": float(np.abs(batch.positions.numpy() - atoms.positions).max()),
        "velocities": float(np.abs(batch.velocities.numpy() - atoms.get_velocities()).max()),
        "cell": float(np.abs(batch.cell[0].numpy() - atoms.cell.array).max()),
    }
