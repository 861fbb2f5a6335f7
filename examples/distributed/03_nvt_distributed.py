"""NVT (Langevin) molecular dynamics of liquid-like argon, domain-decomposed.

    torchrun --nproc_per_node=2 examples/distributed/03_nvt_distributed.py [--steps 200]

Rank 0 builds the full system; `partition()` hands every rank its atoms; a RANK_ZERO
thermo logger prints the table. Works on CPU (gloo) and GPU (NCCL, one GPU per rank).
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch
from ase.build import bulk

from nvdd_plugins import AtomicData, Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVTLangevin, ThermoLogger
from nvdd_plugins.models import LennardJonesModel


def build_full_system(cells: int, temperature: float, device: torch.device) -> Batch:
    """fcc argon, `cells`^3 conventional cells, Maxwell-Boltzmann velocities."""
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True) * (cells, cells, cells)
    rng = np.random.default_rng(0)
    masses = atoms.get_masses()
    kt = 8.617333262e-5 * temperature
    velocities = rng.normal(size=(len(atoms), 3)) * np.sqrt(kt / masses)[:, None]
    data = AtomicData(
        positions=torch.tensor(atoms.positions),
        atomic_numbers=torch.tensor(atoms.numbers),
        atomic_masses=torch.tensor(masses),
        cell=torch.tensor(atoms.cell.array).unsqueeze(0),
        pbc=torch.tensor(atoms.pbc),
    )
    data.add_node_property("velocities", torch.tensor(velocities))
    return Batch.from_data_list([data], device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--cells", type=int, default=5, help="fcc cells per axis (4 atoms each)")
    parser.add_argument("--temperature", type=float, default=120.0, help="K")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    manager = DistributedManager.initialize()
    try:
        model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=8.5, shift=True)
        integrator = NVTLangevin(model, dt=5.0, temperature=args.temperature, friction=0.01, seed=1)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=manager.mesh)
        hooks = [ThermoLogger(frequency=20)]
        with DomainParallel(integrator, config, n_steps=args.steps, hooks=hooks) as dynamics:
            full = (
                build_full_system(args.cells, args.temperature, manager.device)
                if manager.rank == 0
                else None
            )
            owned = dynamics.partition(full)
            print(f"rank {manager.rank}/{manager.world_size}: {owned.num_nodes} atoms", flush=True)
            dynamics.run()
            if manager.rank == 0:
                print(f"done: {args.steps} steps, {dynamics.model.domain.rebuilds} rebuilds")
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
