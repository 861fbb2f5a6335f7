"""An AIMNet2 model under domain decomposition, against the same model in one process.

    .venv/bin/python examples/models/aimnet2_dd.py [--ranks 2] [--molecules 3] [--charge 0]

A tiny random-weight AIMNet2 (aimnet's bundled `aimnet2.yaml`, shrunk; built offline) with
aimnet's damped shifted force Coulomb (cutoff 8 Å) runs on a cluster of `--molecules`³ water
molecules carrying a total charge `--charge`, once in one process and once through nvdd's
ASE calculator split over `--ranks` simulated ranks (threads; under mpirun the same
calculator runs one rank per process). The charge equilibration of each pass needs the
whole cluster's sums: the ranks all-reduce them. For a trained model, wrap aimnet's
calculator: `AIMNet2Wrapper.from_calculator(calc)` after `calc.set_lrcoulomb_method("dsf")`.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from aimnet.modules import LRCoulomb
from ase import Atoms
from ase.build import molecule

from nvdd_plugins import Batch
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import AIMNet2Wrapper, evaluate_model, random_aimnet2


def water_cluster(n: int, spacing: float = 3.1, seed: int = 0) -> Atoms:
    """n x n x n water molecules on a grid, randomly turned and shifted; no cell."""
    rng = np.random.default_rng(seed)
    cluster = Atoms()
    for index in np.ndindex(n, n, n):
        water = molecule("H2O")
        water.rotate(rng.uniform(0, 360), rng.normal(size=3))
        water.translate(np.array(index) * spacing + rng.normal(scale=0.1, size=3))
        cluster += water
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--molecules", type=int, default=3, help="water molecules per edge")
    parser.add_argument("--charge", type=float, default=0.0, help="total charge (e)")
    args = parser.parse_args()

    atoms = water_cluster(args.molecules)
    coulomb = LRCoulomb(key_out="energy", method="dsf", dsf_rc=8.0, subtract_sr=False)
    model = AIMNet2Wrapper(random_aimnet2(5.0, 4.6), coulomb.double(), charge=args.charge)
    single = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "forces"))

    def rank(comm):
        calc = DomainDecomposedCalculator(model, comm=comm)
        return calc.get_potential_energy(atoms), torch.from_numpy(calc.get_forces(atoms))

    energy, forces = run_simulated(args.ranks, rank)[0]
    print(f"{len(atoms)} atoms, cutoff {model.cutoff:g} Å (the Coulomb pairs)")
    print(f"total charge of the equilibrated charges: {float(single['charges'].sum()):.6f} e")
    print(f"energy: 1 process {float(single['energy'][0]):.10f} eV")
    print(f"energy: {args.ranks} ranks   {energy:.10f} eV")
    print(f"max |force difference|: {float((forces - single['forces']).abs().max()):.2e} eV/Å")


if __name__ == "__main__":
    main()
