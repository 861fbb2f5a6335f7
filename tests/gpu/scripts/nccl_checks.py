"""Run under `torchrun --nproc_per_node=2` on two GPUs (NCCL): each check prints one line.

forces  -- float64 forces and energies through DomainParallel and the replicated
           evaluation equal the single-process run on one GPU (LJ, the MPNN, MACE, and MACE
           with cuEquivariance's fused kernels when installed); each rank's atoms are on
           its own GPU
raise   -- rank 1 raises while rank 0 waits in a collective (the job must end promptly)
"""

from __future__ import annotations

import importlib.util
import sys
import time

import torch

from nvdd_plugins import (
    Batch,
    DistributedManager,
    DomainConfig,
    DomainParallel,
    ReplicatedModel,
)
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import evaluate_model
from tests.helpers.oracle import errors, properties_for, requested
from tests.helpers.systems import SYSTEMS, lj_model, mpnn_model


def _models(device: torch.device) -> dict:
    """name -> (model factory on `device`, atoms transform)."""
    out = {
        "lj": (lambda: lj_model().to(device), _same),
        "mpnn": (lambda: mpnn_model().to(device), _same),
    }
    try:
        from nvdd_plugins.models import MACEWrapper
        from tests.helpers.mace_models import tiny_mace, with_two_species
    except ImportError:
        return out
    out["mace"] = (lambda: MACEWrapper(tiny_mace()).to(device), with_two_species)
    if importlib.util.find_spec("cuequivariance_ops_torch") is not None:  # fused GPU kernels
        out["mace-cueq"] = (
            lambda: MACEWrapper(tiny_mace().to(device), cuequivariance=True),
            with_two_species,
        )
    return out


def _same(atoms):
    return atoms


def check_forces(manager: DistributedManager) -> None:
    device = manager.device
    worst = 0.0
    for name, (factory, species) in _models(device).items():
        for system in ("bulk", "slab", "cluster"):
            atoms = species(SYSTEMS[system]())
            model = factory()
            properties = properties_for(atoms)
            batch = Batch.from_atoms(atoms, device=device)
            ref = requested(evaluate_model(model, batch, properties), properties)
            config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=manager.mesh)
            result = ReplicatedModel(model, config)(batch, properties)
            errs = errors(requested(result, properties), ref, len(atoms))
            dynamics = DomainParallel(NVE(model, 1.0), config)
            full = None
            if manager.rank == 0:
                full = Batch.from_atoms(atoms, device=device)
                full.add_node_property("velocities", torch.zeros_like(full.positions))
            owned = dynamics.partition(full)
            assert owned.positions.device == device, (owned.positions.device, device)
            forces = dynamics.model(owned, ("energy", "forces"))["forces"]
            by_id = ref["forces"][owned.global_ids]
            errs["dd_forces"] = float((forces - by_id).abs().max()) if len(forces) else 0.0
            worst = max(worst, errs["forces"], errs["dd_forces"])
            print(f"rank {manager.rank} {name}/{system}: {errs}", flush=True)
            assert errs["forces"] < 1e-8 and errs["dd_forces"] < 1e-8, (name, system, errs)
    print(f"rank {manager.rank}: worst 2-GPU vs 1-GPU force error {worst:.2e} eV/A", flush=True)


def check_raise(manager: DistributedManager) -> None:
    if manager.rank == 1:
        print(f"failing at {time.time()!r}", flush=True)
        raise RuntimeError("rank 1 failed on purpose")
    manager.mesh.all_reduce(torch.ones(1, device=manager.device))  # rank 0 waits here
    print("rank 0 was not stopped", flush=True)


def main() -> None:
    manager = DistributedManager.initialize()
    try:
        {"forces": check_forces, "raise": check_raise}[sys.argv[1]](manager)
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
