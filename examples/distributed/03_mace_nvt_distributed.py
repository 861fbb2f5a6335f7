"""NVT (Langevin) molecular dynamics of copper with MACE (or argon with Lennard-Jones),
domain-decomposed.

    torchrun --nproc_per_node=2 examples/distributed/03_mace_nvt_distributed.py [--steps 100]
    torchrun --nproc_per_node=2 examples/distributed/03_mace_nvt_distributed.py --model lj
    mpirun -n 2 python -m mpi4py examples/distributed/03_mace_nvt_distributed.py --model lj \
        --trajectory md.traj

Rank 0 builds the full system; `partition()` hands every rank its atoms; a RANK_ZERO thermo
logger prints the table (with --trajectory, a RANK_ZERO writer saves every 10th frame). The
MACE model is a tiny random-weight one (no download): pass --mace-file to run a trained
mace-torch model instead. CPU (gloo) or GPU (NCCL, one per rank).
"""

from __future__ import annotations

import argparse

import torch
from copper_or_argon import add_model_arguments, load_model, partition_crystal

from nvdd_plugins import DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVTLangevin, ThermoLogger, TrajectoryWriter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser, cells=4)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--trajectory", help="write every 10th frame to this ASE file (rank 0)")
    args = parser.parse_args()

    manager = DistributedManager.initialize()
    try:
        dtype = torch.float32 if manager.device.type == "cuda" else torch.float64
        model, element, lattice, dt = load_model(args, manager.device, dtype)
        integrator = NVTLangevin(model, dt, temperature=args.temperature, friction=0.01, seed=1)
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=manager.mesh)
        hooks = [ThermoLogger(frequency=10)]
        if args.trajectory:
            hooks.append(TrajectoryWriter(args.trajectory, frequency=10))
        with DomainParallel(integrator, config, n_steps=args.steps, hooks=hooks) as dynamics:
            partition_crystal(dynamics, manager, element, lattice, args, dtype)
            dynamics.run()
            if manager.rank == 0:
                print(f"done: {args.steps} steps, {dynamics.model.rebuilds} rebuilds")
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
