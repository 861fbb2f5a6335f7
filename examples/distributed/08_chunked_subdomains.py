"""Each rank's sub-domain evaluated in chunks, one after another on its device: systems larger
than the devices hold together, with the same results.

    torchrun --nproc_per_node=2 examples/distributed/08_chunked_subdomains.py     # CPU, forced
    mpirun -n 2 python -m mpi4py examples/distributed/08_chunked_subdomains.py    # the same
    torchrun --nproc_per_node=2 examples/distributed/08_chunked_subdomains.py --model mace \
        --cells 60 --chunk-atoms auto                                             # GPUs

`DomainConfig(chunk_atoms=N)` cuts every rank's atoms into spatial chunks of at most N rows,
each with a ghost shell of the model's message-passing layers x cutoff ("auto": N from the free
device memory, measured on the first step). The ranks' ghost shells are that thick too, so the
forward needs no halo exchange; one exchange sums the ghosts' forces into their owners. On a
CPU the example also runs the same steps without chunks and prints the largest difference.
"""

from __future__ import annotations

import argparse

import ase.build
import numpy as np
import torch
from ase.md.velocitydistribution import thermalize_momenta
from ase.parallel import DummyMPI

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import MACEWrapper, SimpleMPNN, random_mace


def crystal(cells: int) -> Batch:
    """A rattled periodic fcc Cu crystal of 4 * cells**3 atoms with 300 K velocities."""
    atoms = ase.build.bulk("Cu", "fcc", a=3.61, cubic=True).repeat(cells)
    atoms.rattle(0.05, seed=0)
    # Only rank 0 builds the system: ASE's default comm (its MPI world under mpirun) would
    # make this a collective that the other ranks never join.
    thermalize_momenta(atoms, temperature_K=300.0, rng=np.random.default_rng(0), comm=DummyMPI())
    return Batch.from_atoms(atoms)


def run(model, full: Batch | None, manager: DistributedManager, args, chunk_atoms) -> Batch:
    """`args.steps` NVE steps under DomainParallel; the gathered final system on every rank."""
    config = DomainConfig(model.cutoff, skin=0.5, chunk_atoms=chunk_atoms)
    with DomainParallel(NVE(model, dt=1.0), config, args.steps) as dd:
        dd.partition(full)
        dd.run()
        chunks = dd.model.engine.chunks
        if chunks is not None and chunks.last_plan is not None:
            plan = chunks.last_plan
            print(
                f"rank {manager.rank}: {dd.batch.num_nodes} atoms in {len(plan.rows)} chunks "
                f"of at most {max(plan.rows)} rows ({plan.redundancy:.0%} recomputed)",
                flush=True,
            )
        return dd.gather(dd.batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["mpnn", "mace"], default="mpnn")
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--chunk-atoms", default="1500", help='rows per chunk, or "auto"')
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    chunk_atoms = args.chunk_atoms if args.chunk_atoms == "auto" else int(args.chunk_atoms)
    manager = DistributedManager.initialize()
    try:
        cuda = manager.device.type == "cuda"
        dtype = torch.float32 if cuda else torch.float64
        if args.model == "mace":
            model = MACEWrapper(random_mace([29], r_max=5.0, dtype=dtype))
        else:
            model = SimpleMPNN(cutoff=3.5, hidden=16, n_layers=2).to(dtype)
        model = model.to(manager.device)
        full = crystal(args.cells).to(manager.device) if manager.rank == 0 else None
        if full is not None:
            full.positions, full.velocities = full.positions.to(dtype), full.velocities.to(dtype)
        final = run(model, full, manager, args, chunk_atoms)
        if not cuda:  # the same steps with each sub-domain evaluated whole
            full = crystal(args.cells) if manager.rank == 0 else None
            whole = run(model, full, manager, args, None)
            difference = float((whole.positions - final.positions).abs().max())
            if manager.rank == 0:
                print(f"max position difference from the run without chunks: {difference:.1e} Å")
        if manager.rank == 0:
            print(f"done: {args.steps} steps, {final.num_nodes} atoms", flush=True)
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
