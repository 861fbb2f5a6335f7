"""NPT (Martyna–Tobias–Klein barostat + Nosé–Hoover chains) of copper with MACE (or argon
with Lennard-Jones), domain-decomposed.

    torchrun --nproc_per_node=2 examples/distributed/06_mace_npt_distributed.py [--steps 100]
    torchrun --nproc_per_node=2 examples/distributed/06_mace_npt_distributed.py --model lj
    mpirun -n 2 python -m mpi4py examples/distributed/06_mace_npt_distributed.py --model lj

The thermostat and barostat need the whole system's kinetic energy (and, anisotropic, its
kinetic stress): `NPT` declares them as partial sums and `DomainParallel` reduces them with
one all-reduce per step; the stress comes from the model. The cell moves every step, and
every rank's sub-domain and ghost shell follow it. A RANK_ZERO thermo logger prints the
table with volume and pressure. The MACE model is a tiny random-weight one (no download):
pass --mace-file for a trained mace-torch model. CPU (gloo) or GPU (NCCL, one per rank).
"""

from __future__ import annotations

import argparse

import ase.units
import torch
from copper_or_argon import add_model_arguments, load_model, partition_crystal

from nvdd_plugins import DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NPT, MTKParameters, ThermoLogger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser, cells=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--pressure", type=float, default=0.0, help="GPa")
    parser.add_argument("--anisotropic", action="store_true", help="all nine cell components")
    args = parser.parse_args()

    manager = DistributedManager.initialize()
    try:
        dtype = torch.float32 if manager.device.type == "cuda" else torch.float64
        model, element, lattice, dt = load_model(args, manager.device, dtype)
        integrator = NPT(
            model,
            dt,
            temperature=args.temperature,
            pressure=args.pressure * ase.units.GPa,
            mtk=MTKParameters(tdamp=100 * dt, pdamp=1000 * dt),
            anisotropic=args.anisotropic,
        )
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=manager.mesh)
        hooks = [ThermoLogger(frequency=10, cell=True)]
        with DomainParallel(integrator, config, n_steps=args.steps, hooks=hooks) as dynamics:
            owned = partition_crystal(dynamics, manager, element, lattice, args, dtype)
            dynamics.run()
            conserved = integrator.conserved_energy(owned)  # collective: every rank calls it
            if manager.rank == 0:
                print(
                    f"done: {args.steps} steps, {dynamics.sums.reductions} integrator "
                    f"all-reduces, conserved energy {conserved:.6f} eV"
                )
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
