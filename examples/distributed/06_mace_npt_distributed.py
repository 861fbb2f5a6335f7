"""NPT (Martyna–Tobias–Klein barostat + Nosé–Hoover chains) of copper with MACE (or argon
with Lennard-Jones), domain-decomposed.

    torchrun --nproc_per_node=2 examples/distributed/06_mace_npt_distributed.py [--steps 100]
    torchrun --nproc_per_node=2 examples/distributed/06_mace_npt_distributed.py --model lj

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
import numpy as np
import torch
from ase.build import bulk

from nvdd_plugins import AtomicData, Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NPT, ThermoLogger
from nvdd_plugins.models import LennardJonesModel, MACEWrapper, random_mace


def build_full_system(element: str, lattice: float, cells: int, temperature: float) -> AtomicData:
    """fcc crystal of `cells`^3 conventional cells with Maxwell-Boltzmann velocities."""
    atoms = bulk(element, "fcc", a=lattice, cubic=True) * (cells, cells, cells)
    masses = atoms.get_masses()
    rng = np.random.default_rng(0)
    sigma = np.sqrt(ase.units.kB * temperature / masses)[:, None]
    data = AtomicData(
        positions=torch.tensor(atoms.positions),
        atomic_numbers=torch.tensor(atoms.numbers),
        atomic_masses=torch.tensor(masses),
        cell=torch.tensor(atoms.cell.array).unsqueeze(0),
        pbc=torch.tensor(atoms.pbc),
    )
    data.add_node_property("velocities", torch.tensor(rng.normal(size=(len(atoms), 3)) * sigma))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mace", "lj"], default="mace")
    parser.add_argument("--mace-file", help="a torch.save'd mace-torch model for copper")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--cells", type=int, default=3, help="fcc cells per axis (4 atoms each)")
    parser.add_argument("--temperature", type=float, default=300.0, help="K")
    parser.add_argument("--pressure", type=float, default=0.0, help="GPa")
    parser.add_argument("--anisotropic", action="store_true", help="all nine cell components")
    args = parser.parse_args()

    manager = DistributedManager.initialize()
    try:
        dtype = torch.float32 if manager.device.type == "cuda" else torch.float64
        if args.model == "mace":
            model = (
                MACEWrapper.from_file(args.mace_file, manager.device, dtype)
                if args.mace_file
                else MACEWrapper(random_mace([29], r_max=4.5, dtype=dtype))
            )
            element, lattice, dt = "Cu", 3.61, 2.0
        else:
            model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=8.5, shift=True)
            element, lattice, dt = "Ar", 5.3, 5.0
        model = model.to(manager.device)
        integrator = NPT(
            model,
            dt,
            temperature=args.temperature,
            pressure=args.pressure * ase.units.GPa,
            tdamp=100 * dt,
            pdamp=1000 * dt,
            anisotropic=args.anisotropic,
        )
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=manager.mesh)
        hooks = [ThermoLogger(frequency=10, cell=True)]
        with DomainParallel(integrator, config, n_steps=args.steps, hooks=hooks) as dynamics:
            full = None
            if manager.rank == 0:
                data = build_full_system(element, lattice, args.cells, args.temperature)
                full = Batch.from_data_list([data], device=manager.device).to(dtype=dtype)
            owned = dynamics.partition(full)
            print(f"rank {manager.rank}/{manager.world_size}: {owned.num_nodes} atoms", flush=True)
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
