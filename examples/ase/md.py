"""NVT molecular dynamics with ASE's Langevin, domain-decomposed by the nvdd calculator.

    mpirun -n 2 python -m mpi4py examples/ase/md.py [--steps 100]
    python examples/ase/md.py --device cuda --cuda-graphs auto   # one GPU, replayed calls

Every rank runs the same ASE script on the full Atoms; the calculator splits space, and
ASE writes the trajectory from rank 0 only. On one GPU, `--cuda-graphs auto` replays the
force calls between neighbour-list rebuilds from one captured CUDA graph (off above one rank
and on the CPU).
"""

from __future__ import annotations

import argparse

import numpy as np
from ase import units
from ase.build import bulk
from ase.io import Trajectory
from ase.md.langevin import Langevin
from ase.md.velocitydistribution import thermalize_momenta
from ase.parallel import parprint

from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.models import LennardJonesModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--trajectory", default="md.traj")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cuda-graphs", choices=("False", "auto", "True"), default="False")
    args = parser.parse_args()

    atoms = bulk("Ar", "fcc", a=5.3, cubic=True) * (4, 4, 4)
    thermalize_momenta(atoms, temperature_K=100, rng=np.random.default_rng(0))
    model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=8.5, shift=True)
    graphs = {"False": False, "auto": "auto", "True": True}[args.cuda_graphs]
    model = model.to(args.device)
    atoms.calc = DomainDecomposedCalculator(model, skin=0.5, device=args.device, cuda_graphs=graphs)

    dyn = Langevin(
        atoms,
        5 * units.fs,
        temperature_K=100,
        friction=0.01,
        fixcm=False,
        rng=np.random.default_rng(1),
    )
    with Trajectory(args.trajectory, "w", atoms) as trajectory:
        dyn.attach(trajectory.write, interval=10)

        def report() -> None:
            epot = atoms.get_potential_energy() / len(atoms)
            ekin = atoms.get_kinetic_energy() / len(atoms)
            parprint(
                f"step {dyn.nsteps:5d}  Epot/N {epot:.6f} eV  T {ekin / 1.5 / units.kB:7.2f} K"
            )

        dyn.attach(report, interval=20)
        dyn.run(args.steps)
    parprint(f"wrote {args.trajectory}")
    if atoms.calc.graphed_calls is not None:
        calls = atoms.calc.graphed_calls
        parprint(f"force calls replayed: {calls.replays}, graphs captured: {calls.captures}")


if __name__ == "__main__":
    main()
