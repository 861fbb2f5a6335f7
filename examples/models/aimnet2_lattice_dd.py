"""AIMNet2 with a lattice-sum Coulomb (Ewald or PME) plus DFT-D3 dispersion, under domain
decomposition, against the same model in one process.

    .venv/bin/python examples/models/aimnet2_lattice_dd.py [--ranks 4] [--method pme]
        [--layout slabs] [--d3]

A tiny random-weight AIMNet2 (aimnet's bundled `aimnet2.yaml`, shrunk; built offline) with
an external Coulomb term summed by Ewald or PME over the periodic images of a box of water
molecules, with the parameters aimnet's own calculator picks for this box
(`aimnet_electrostatics`), and with `--d3` PBE-D3(BJ) dispersion added by `SumModel` (each
part on its own cutoff). It runs once in one process and once through nvdd's ASE calculator
on `--ranks` simulated ranks (threads; under mpirun the same calculator runs one rank per
process): the charge sums, the structure factors or the charge mesh are summed over the
ranks, or with `--layout slabs` the mesh stays distributed. For a trained model, wrap
aimnet's calculator: `AIMNet2Wrapper.from_calculator(calc, charge, mult, *params)` after
`calc.set_lrcoulomb_method("pme")`.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import torch
from aimnet.calculators import AIMNet2Calculator
from ase import Atoms
from ase.build import molecule

from nvdd_plugins import Batch
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import AIMNet2Wrapper, SumModel, evaluate_model, random_aimnet2
from nvdd_plugins.models.aimnet2 import aimnet_electrostatics


def water_box(n: int, spacing: float = 3.1, seed: int = 0) -> Atoms:
    """n x n x n water molecules on a grid, randomly turned and shifted, in a periodic box."""
    rng = np.random.default_rng(seed)
    box = Atoms(cell=np.eye(3) * n * spacing, pbc=True)
    for index in np.ndindex(n, n, n):
        water = molecule("H2O")
        water.rotate(rng.uniform(0, 360), rng.normal(size=3))
        water.translate(np.array(index) * spacing + rng.normal(scale=0.1, size=3))
        box += water
    return box


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--molecules", type=int, default=4, help="water molecules per edge")
    parser.add_argument("--method", choices=["ewald", "pme"], default="pme")
    parser.add_argument("--layout", choices=["auto", "whole", "slabs"], default="auto")
    parser.add_argument("--d3", action="store_true", help="add PBE-D3(BJ) (the d3 extra)")
    args = parser.parse_args()

    atoms = water_box(args.molecules)
    model = random_aimnet2(5.0, 4.6)
    calc = AIMNet2Calculator(model, device="cpu", needs_coulomb=True)
    calc.set_lrcoulomb_method(args.method, ewald_accuracy=1e-5)
    electrostatics, cutoff = aimnet_electrostatics(calc, atoms)  # what aimnet picks here
    if args.method == "pme":
        electrostatics = replace(electrostatics, layout=args.layout)
    wrapper = AIMNet2Wrapper.from_calculator(calc, 0.0, 1.0, electrostatics, cutoff)
    parts = [wrapper]
    if args.d3:
        from nvdd_plugins.models import DFTD3Model

        parts.append(DFTD3Model(a1=0.4289, a2=4.4407, s8=0.7875, cutoff=10.0, cn_cutoff=8.0))
    total = SumModel(*parts)
    single = evaluate_model(total, Batch.from_atoms(atoms), ("energy", "forces"))

    def rank(comm):
        calc = DomainDecomposedCalculator(total, comm=comm)
        return calc.get_potential_energy(atoms), torch.from_numpy(calc.get_forces(atoms))

    energy, forces = run_simulated(args.ranks, rank)[0]
    print(f"{len(atoms)} atoms, {electrostatics}, real-space cutoff {cutoff:.2f} Å")
    print(f"energy: 1 process {float(single['energy'][0]):.10f} eV")
    print(f"energy: {args.ranks} ranks   {energy:.10f} eV")
    print(f"max |force difference|: {float((forces - single['forces']).abs().max()):.2e} eV/Å")


if __name__ == "__main__":
    main()
