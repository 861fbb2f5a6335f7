"""What the MD examples 03 and 06 share: the model (a tiny random-weight MACE for copper, a
trained mace-torch file, or Lennard-Jones argon) and an fcc crystal with thermal velocities,
built on rank 0 and partitioned."""

from __future__ import annotations

import argparse

import numpy as np
import torch
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta
from ase.parallel import DummyMPI

from nvdd_plugins import Batch, DistributedManager, DomainParallel
from nvdd_plugins.models import BaseModelMixin, LennardJonesModel, MACEWrapper, random_mace


def add_model_arguments(parser: argparse.ArgumentParser, cells: int) -> None:
    """--model, --mace-file, --cells (default `cells`), --temperature."""
    parser.add_argument("--model", choices=["mace", "lj"], default="mace")
    parser.add_argument("--mace-file", help="a torch.save'd mace-torch model for copper")
    parser.add_argument("--cells", type=int, default=cells, help="fcc cells per axis (4 atoms)")
    parser.add_argument("--temperature", type=float, default=300.0, help="K")


def load_model(
    args: argparse.Namespace, device: torch.device, dtype: torch.dtype
) -> tuple[BaseModelMixin, str, float, float]:
    """The model on `device`, its element, fcc lattice constant (Å) and a time step (fs)."""
    if args.model == "mace":
        model = (
            MACEWrapper.from_file(args.mace_file, device, dtype)
            if args.mace_file
            else MACEWrapper(random_mace([29], r_max=4.5, dtype=dtype))
        )
        element, lattice, dt = "Cu", 3.61, 2.0
    else:
        model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=8.5, shift=True)
        element, lattice, dt = "Ar", 5.3, 5.0
    return model.to(device), element, lattice, dt


def build_full_system(element: str, lattice: float, cells: int, temperature: float) -> Batch:
    """fcc crystal of `cells`^3 conventional cells with Maxwell-Boltzmann velocities."""
    atoms = bulk(element, "fcc", a=lattice, cubic=True) * (cells, cells, cells)
    # Rank 0 alone builds it: ASE's default comm would make the draw an MPI collective.
    rng = np.random.default_rng(0)
    thermalize_momenta(atoms, temperature_K=temperature, rng=rng, comm=DummyMPI())
    return Batch.from_atoms(atoms)


def partition_crystal(
    dynamics: DomainParallel,
    manager: DistributedManager,
    element: str,
    lattice: float,
    args: argparse.Namespace,
    dtype: torch.dtype,
) -> Batch:
    """Build the crystal on rank 0, partition it, print this rank's share; returns it."""
    full = None
    if manager.rank == 0:
        full = build_full_system(element, lattice, args.cells, args.temperature)
        full = full.to(manager.device, dtype)
    owned = dynamics.partition(full)
    print(f"rank {manager.rank}/{manager.world_size}: {owned.num_nodes} atoms", flush=True)
    return owned
