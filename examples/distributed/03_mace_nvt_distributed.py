"""NVT (Langevin) molecular dynamics of copper with MACE (or argon with Lennard-Jones),
domain-decomposed.

    torchrun --nproc_per_node=2 examples/distributed/03_mace_nvt_distributed.py [--steps 100]
    torchrun --nproc_per_node=2 examples/distributed/03_mace_nvt_distributed.py --model lj

Rank 0 builds the full system; `partition()` hands every rank its atoms; a RANK_ZERO thermo
logger prints the table. The MACE model is a tiny random-weight one (no download): pass
--mace-file to run a trained mace-torch model instead. CPU (gloo) or GPU (NCCL, one per rank).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from ase.build import bulk

from nvdd_plugins import AtomicData, Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVTLangevin, ThermoLogger
from nvdd_plugins.models import LennardJonesModel, MACEWrapper, random_mace

KB_EV_PER_K = 8.617333262e-5


def build_full_system(element: str, lattice: float, cells: int, temperature: float) -> AtomicData:
    """fcc crystal of `cells`^3 conventional cells with Maxwell-Boltzmann velocities."""
    atoms = bulk(element, "fcc", a=lattice, cubic=True) * (cells, cells, cells)
    masses = atoms.get_masses()
    rng = np.random.default_rng(0)
    velocities = (
        rng.normal(size=(len(atoms), 3)) * np.sqrt(KB_EV_PER_K * temperature / masses)[:, None]
    )
    data = AtomicData(
        positions=torch.tensor(atoms.positions),
        atomic_numbers=torch.tensor(atoms.numbers),
        atomic_masses=torch.tensor(masses),
        cell=torch.tensor(atoms.cell.array).unsqueeze(0),
        pbc=torch.tensor(atoms.pbc),
    )
    data.add_node_property("velocities", torch.tensor(velocities))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mace", "lj"], default="mace")
    parser.add_argument("--mace-file", help="a torch.save'd mace-torch model for copper")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--cells", type=int, default=4, help="fcc cells per axis (4 atoms each)")
    parser.add_argument("--temperature", type=float, default=300.0, help="K")
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
        integrator = NVTLangevin(model, dt, temperature=args.temperature, friction=0.01, seed=1)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=manager.mesh)
        hooks = [ThermoLogger(frequency=10)]
        with DomainParallel(integrator, config, n_steps=args.steps, hooks=hooks) as dynamics:
            full = None
            if manager.rank == 0:
                data = build_full_system(element, lattice, args.cells, args.temperature)
                full = Batch.from_data_list([data], device=manager.device).to(dtype=dtype)
            owned = dynamics.partition(full)
            print(f"rank {manager.rank}/{manager.world_size}: {owned.num_nodes} atoms", flush=True)
            dynamics.run()
            if manager.rank == 0:
                print(f"done: {args.steps} steps, {dynamics.model.domain.rebuilds} rebuilds")
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
