"""Issue 22's peer: the cpu_lj_step.py job under nvalchemi-toolkit 0.2.0 (Warp kernels).

    OMP_NUM_THREADS=1 /tmp/peer/bin/python benchmarks/peer_lj_step.py               # 1 rank
    OMP_NUM_THREADS=1 /tmp/peer/bin/torchrun --nproc_per_node=2 benchmarks/peer_lj_step.py
    OMP_NUM_THREADS=1 /tmp/peer/bin/python benchmarks/peer_lj_step.py --check 20   # energy

Runs in a scratch venv holding nvalchemi-toolkit (`pip install torch==2.13.0
nvalchemi-toolkit==0.2.0`); it is not a dependency of this repo and this file imports nothing
from it. The job is cpu_lj_step.py's, built from the same tensors (benchmarks/lj_job.py, which both
drivers share and which imports no nvdd, absent from the peer's venv): fcc argon
(a = 5.26 Å, rattled 0.05 Å with torch seed 0, 60 K velocities from numpy seed 0, mass 40),
LJ ε 0.0104 eV, σ 3.40 Å, hard cutoff 8.5 Å (no shift, no switching), dt 1 fs, float64, one
thread per rank, run as `DomainParallel(NVE(LennardJonesModelWrapper))` with the peer's
`NeighborListHook` (cell list, `--nl-method`; Verlet skin `--skin`) on a 1-D gloo DeviceMesh,
with the peer's gloo shim for its uneven all_to_all (`_patch_physicsnemo_all_to_all_for_gloo`).
On one rank DomainParallel passes straight through to the inner NVE (the peer's design).

Timing as in cpu_lj_step.py: `--warmup` steps, then `--rounds` blocks of `--steps` steps, the
median steps/s of the blocks (rank 0, after a barrier per block). `--check N` prints the total
energy (potential + kinetic, eV) of the initial state and after N steps instead, to compare
with `cpu_lj_step.py --check N` (the peer's fs is CODATA 2018, ASE's 2014: dt differs by
3.9e-9 relative).
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from lj_job import (
    ARGON_MASS,
    CUTOFF,
    DT_FS,
    EPSILON,
    LATTICE,
    SIGMA,
    fcc_crystal,
    job_arguments,
    maxwell_velocities,
    median_rate,
    print_check,
    print_header,
    print_row,
)


def fcc_tensors(n_atoms: int, temperature: float = 60.0) -> dict[str, torch.Tensor]:
    """benchmarks/common.py `fcc_batch(n, 5.26, (18,), float64, cpu, 60)`, as plain tensors."""
    positions, cell = fcc_crystal(n_atoms, LATTICE, 0.05, torch.float64, torch.device("cpu"))
    n = positions.shape[0]
    return {
        "positions": positions,
        "atomic_numbers": torch.full((n,), 18, dtype=torch.long),
        "atomic_masses": torch.full((n,), ARGON_MASS, dtype=torch.float64),
        "velocities": torch.tensor(maxwell_velocities(n, temperature)),
        "cell": cell.unsqueeze(0),
        "pbc": torch.ones(1, 3, dtype=torch.bool),
    }


def peer_batch(n_atoms: int):
    """The job's system as the peer's one-system `Batch` (with zero forces/energy slots)."""
    from nvalchemi.data import AtomicData, Batch

    t = fcc_tensors(n_atoms)
    data = AtomicData(
        positions=t["positions"],
        atomic_numbers=t["atomic_numbers"],
        atomic_masses=t["atomic_masses"],
        velocities=t["velocities"],
        forces=torch.zeros_like(t["positions"]),
        energy=torch.zeros(1, 1, dtype=torch.float64),
        cell=t["cell"],
        pbc=t["pbc"],
    )
    return Batch.from_data_list([data])


def make_run(mesh, atoms: int, skin: float, method: str = "cell_list_atom_centric"):
    """DomainParallel(NVE(LJ)) with its neighbour-list hook, partitioned; (run, owned batch)."""
    from nvalchemi.distributed import DomainConfig, DomainParallel
    from nvalchemi.dynamics import NVE
    from nvalchemi.dynamics.base import DynamicsStage
    from nvalchemi.hooks import NeighborListHook
    from nvalchemi.models.lj import LennardJonesModelWrapper

    model = LennardJonesModelWrapper(EPSILON, SIGMA, CUTOFF, switch_width=0.0)
    hook = NeighborListHook(
        model.model_config.neighbor_config,
        skin=skin,
        stage=DynamicsStage.BEFORE_COMPUTE,
        method=None if method == "auto" else method,
    )
    nve = NVE(model, DT_FS, hooks=[hook])
    run = DomainParallel(nve, DomainConfig(cutoff=CUTOFF, skin=skin, mesh=mesh))
    rank = dist.get_rank() if dist.is_initialized() else 0
    full = peer_batch(atoms) if rank == 0 or mesh is None else None
    batch = run.partition(full)
    if mesh is None:
        # One rank: DomainParallel passes through to NVE.step, which does not compute the
        # initial forces (the distributed path primes them); do what that path does.
        run._prime_forces(batch)
    return run, batch


def global_sum(value: torch.Tensor, distributed: bool) -> torch.Tensor:
    if distributed:
        value = value.clone()
        dist.all_reduce(value)
    return value


def total_energy(run, batch, distributed: bool) -> tuple[float, float, int]:
    """(potential, kinetic, atoms) of the whole system; potential from the model's energy."""
    masses = batch.atomic_masses.reshape(-1)
    local = torch.stack(
        [
            0.5 * (masses * (batch.velocities**2).sum(-1)).sum(),
            torch.tensor(float(batch.positions.shape[0]), dtype=torch.float64),
        ]
    )
    kinetic, atoms = global_sum(local, distributed).tolist()
    potential = float(batch.energy.sum())  # DomainParallel consolidates it (replicated)
    return potential, kinetic, int(atoms)


def barrier(distributed: bool) -> None:
    if distributed:
        dist.barrier()


def main() -> None:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument(
        "--nl-method",
        default="cell_list_atom_centric",
        help="the peer's neighbour-list method; 'auto': its own pick (naive O(N^2) at 2,048)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    mesh = None
    if distributed:
        from nvalchemi.distributed.validate.worker import (
            _patch_physicsnemo_all_to_all_for_gloo,
        )
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo")
        # Gloo has no uneven all_to_all; the peer's own CPU shim (its validator and tests use
        # it) routes the halo/migration all_to_all_v through isend/irecv.
        _patch_physicsnemo_all_to_all_for_gloo()
        mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("domain",))
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    rows = []
    if rank == 0:
        title = f"# peer nvalchemi-toolkit, Ar LJ NVE, float64, {world} rank(s), 1 thread each"
        print_header(title, bool(args.check))
    try:
        for atoms in args.atoms:
            for skin in args.skin:
                run, batch = make_run(mesh, atoms, skin, args.nl_method)
                if args.check:
                    batch = run.run(batch, n_steps=1)  # primes forces, then one step
                    rows.append(check(run, batch, args.check, atoms, skin, distributed, rank))
                    continue
                owned = [batch]  # the peer's run returns the batch it advanced

                def advance(n: int, run=run, owned=owned) -> None:
                    owned[0] = run.run(owned[0], n_steps=n)

                rate = median_rate(advance, lambda: barrier(distributed), args)
                batch = owned[0]
                n = total_energy(run, batch, distributed)[2]
                rows.append({"atoms": n, "skin": skin, "steps_per_s": rate})
                if rank == 0:
                    print_row(n, skin, rate, world)
        if rank == 0 and args.json:
            with open(args.json, "w") as handle:
                json.dump({"args": vars(args), "ranks": world, "rows": rows}, handle, indent=1)
    finally:
        if distributed:
            dist.destroy_process_group()


def check(run, batch, n_steps: int, atoms: int, skin: float, distributed: bool, rank: int):
    """Total energy after 1 and after `n_steps` steps (the peer computes no energy at 0)."""
    first = total_energy(run, batch, distributed)
    batch = run.run(batch, n_steps=n_steps - 1)
    last = total_energy(run, batch, distributed)
    return print_check(skin, n_steps, first, last) if rank == 0 else {}


if __name__ == "__main__":
    main()
