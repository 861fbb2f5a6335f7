"""Relax a defected argon crystal with ASE's FIRE, domain-decomposed by the nvdd calculator.

mpirun -n 2 python -m mpi4py examples/ase/relax.py [--fmax 0.001]
"""

from __future__ import annotations

import argparse

import numpy as np
from ase.build import bulk
from ase.optimize import FIRE
from ase.parallel import parprint

from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.models import LennardJonesModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fmax", type=float, default=1e-3, help="eV/Å")
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()

    atoms = bulk("Ar", "fcc", a=5.3, cubic=True) * (3, 3, 3)
    del atoms[0]  # a vacancy
    atoms.positions += np.random.default_rng(0).normal(scale=0.05, size=atoms.positions.shape)
    model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=8.5, shift=True)
    atoms.calc = DomainDecomposedCalculator(model, skin=0.3)

    start = atoms.get_potential_energy()
    optimizer = FIRE(atoms, logfile=None)
    converged = optimizer.run(fmax=args.fmax, steps=args.steps)
    parprint(
        f"FIRE {'converged' if converged else 'stopped'} after {optimizer.nsteps} steps: "
        f"E {start:.6f} -> {atoms.get_potential_energy():.6f} eV, "
        f"max |F| {np.abs(atoms.get_forces()).max():.2e} eV/Å"
    )


if __name__ == "__main__":
    main()
