"""A two-stage pipeline over a 2-D (pipeline, domain) mesh: FIRE relaxation, then
Nosé–Hoover NVT, each stage domain-decomposed over its own ranks.

    torchrun --nproc_per_node=2 examples/distributed/07_fire_nvt_dd.py   # 2 stages x 1 rank
    torchrun --nproc_per_node=4 examples/distributed/07_fire_nvt_dd.py   # 2 stages x 2 ranks
    mpirun -n 2 python -m mpi4py examples/distributed/07_fire_nvt_dd.py  # or any launcher

Several perturbed argon crystals (Lennard-Jones) enter stage 0; while stage 1 runs MD on
system k, stage 0 already relaxes system k + 1. FIRE's convergence is decided mesh-wide
(its v·f, v·v, f·f and unconverged-atom count are one all-reduce per step over the stage's
ranks). Stage 0 prints a convergence table, stage 1 a thermo table per system.
"""

from __future__ import annotations

import argparse

import numpy as np
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta
from ase.parallel import DummyMPI
from torch.distributed.device_mesh import init_device_mesh

from nvdd_plugins import Batch, DistributedManager
from nvdd_plugins.dynamics import FIRE, NoseHoover, ThermoLogger
from nvdd_plugins.models import LennardJonesModel
from nvdd_plugins.parallel import DomainPipeline, PipelineMesh, Stage


def build_systems(count: int, cells: int, temperature: float) -> list[Batch]:
    """`count` fcc argon crystals with random displacements and thermal velocities."""
    systems = []
    for seed in range(count):
        rng = np.random.default_rng(seed)
        atoms = bulk("Ar", "fcc", a=5.3, cubic=True) * (cells, cells, cells)
        atoms.positions += rng.normal(scale=0.2, size=atoms.positions.shape)
        # Built on rank 0 only: ASE's default comm would make this an MPI collective.
        thermalize_momenta(atoms, temperature_K=temperature, rng=rng, comm=DummyMPI())
        systems.append(Batch.from_atoms(atoms))
    return systems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, default=3)
    parser.add_argument("--cells", type=int, default=3, help="fcc cells per axis (4 atoms each)")
    parser.add_argument("--fmax", type=float, default=0.01, help="eV/Å")
    parser.add_argument("--steps", type=int, default=50, help="NVT steps per system")
    parser.add_argument("--temperature", type=float, default=100.0, help="K")
    args = parser.parse_args()

    manager = DistributedManager.initialize()
    try:
        if manager.world_size % 2:
            raise SystemExit("run on an even number of ranks (2 stages x domain ranks)")
        shape = (2, manager.world_size // 2)
        device_mesh = init_device_mesh(
            manager.device.type, shape, mesh_dim_names=("pipeline", "domain")
        )
        mesh = PipelineMesh.from_device_mesh(device_mesh)
        model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=8.5, shift=True)
        model = model.to(manager.device)
        stages = [
            Stage(lambda: FIRE(model, fmax=args.fmax), n_steps=1000, name="FIRE"),
            Stage(
                lambda: NoseHoover(model, 5.0, args.temperature, tdamp=500.0),
                n_steps=args.steps,
                hooks=[ThermoLogger(frequency=25)],
                name="NVT",
            ),
        ]
        pipeline = DomainPipeline(stages, mesh, cutoff=model.cutoff, skin=0.5)
        print(
            f"rank {manager.rank}/{manager.world_size}: stage {mesh.stage} "
            f"({stages[mesh.stage].name}), domain rank {mesh.domain.rank}/{mesh.domain.size}",
            flush=True,
        )
        systems = None
        if manager.rank == 0:
            systems = build_systems(args.systems, args.cells, args.temperature)
        finished = pipeline.run(systems)
        if mesh.stage == 0 and pipeline.is_stage_root:
            print(f"{'system':>6} {'FIRE steps':>10} {'converged':>9}")
            for index, record in enumerate(pipeline.records):
                print(f"{index:6d} {record['steps']:10d} {record['converged']!s:>9}", flush=True)
        if finished:
            energies = [f"{float(system.energy[0]):.4f}" for system in finished]
            print(f"done: {len(finished)} systems relaxed and run; Epot[eV] {energies}")
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
