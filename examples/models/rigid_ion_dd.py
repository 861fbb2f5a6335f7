"""Rock-salt NaCl with Ewald or PME electrostatics under domain decomposition.

    .venv/bin/python examples/models/rigid_ion_dd.py [--ranks 4] [--cells 3] [--method pme]

A rigid-ion model (formal charges, Tosi-Fumi Born-Mayer-Huggins pairs, LAMMPS's
`born/coul/long`) on `--cells`³ rock-salt cells, sheared and shaken, runs once in one
process and once through nvdd's ASE calculator split over `--ranks` simulated ranks
(threads; under `mpirun -n P python -m mpi4py` the same calculator runs one rank per
process). Each rank sums the structure factors (Ewald) or spreads the charges on the mesh
(PME) of the atoms it owns; one all-reduce completes the sum. docs/long_range.md.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from ase.build import bulk

from nvdd_plugins import Batch
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import PME, Ewald, RigidIonModel, evaluate_model

CUTOFF = 6.0  # Å, real space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--cells", type=int, default=3, help="rock-salt cells per edge")
    parser.add_argument("--method", default="pme", choices=["pme", "ewald"])
    args = parser.parse_args()

    atoms = bulk("NaCl", "rocksalt", a=5.64, cubic=True).repeat(args.cells)
    shear = np.array([[1.0, 0.05, 0.0], [0.0, 1.0, 0.03], [0.04, 0.0, 1.0]])
    atoms.set_cell(atoms.cell.array @ shear, scale_atoms=True)
    atoms.positions += np.random.default_rng(0).normal(scale=0.1, size=atoms.positions.shape)

    ewald = Ewald.for_accuracy(CUTOFF, accuracy=1e-6)
    electrostatics: Ewald | PME = ewald
    if args.method == "pme":
        electrostatics = PME.for_cell(ewald.alpha, atoms.cell.array, spacing=0.5, order=6)
    model = RigidIonModel.nacl(CUTOFF, electrostatics)
    single = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "forces", "stress"))

    def rank(comm):
        calc = DomainDecomposedCalculator(model, comm=comm)
        energy = calc.get_potential_energy(atoms)
        return energy, torch.from_numpy(calc.get_forces(atoms)), calc.get_stress(atoms)

    energy, forces, stress = run_simulated(args.ranks, rank)[0]
    print(f"{len(atoms)} ions, {electrostatics}")
    print(f"energy: 1 process {float(single['energy'][0]):.10f} eV")
    print(f"energy: {args.ranks} ranks   {energy:.10f} eV")
    print(f"max |force difference|: {float((forces - single['forces']).abs().max()):.2e} eV/Å")
    print(f"pressure: {-stress[:3].mean() * 1.602176634e6:.3f} bar")


if __name__ == "__main__":
    main()
