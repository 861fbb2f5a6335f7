"""Warm MD steps/s of the issue-22 CPU job: Ar Lennard-Jones NVE under `DomainParallel`.

    OMP_NUM_THREADS=1 python benchmarks/cpu_lj_step.py                  # every case, 1 rank
    OMP_NUM_THREADS=1 python benchmarks/cpu_lj_step.py --plain          # NVE(model).run alone
    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 benchmarks/cpu_lj_step.py   # 2 ranks (gloo)
    OMP_NUM_THREADS=1 python benchmarks/cpu_lj_step.py --atoms 2048 --skin 0 --profile

The job: fcc argon (a = 5.26 Å, rattled 0.05 Å, 60 K Maxwell-Boltzmann velocities), LJ
ε 0.0104 eV, σ 3.40 Å, hard cutoff 8.5 Å (no shift), dt 1 fs, float64, one thread per rank.
Per case (atoms × skin) it takes `--warmup` steps, then `--rounds` timed blocks of `--steps`
steps and prints the median steps/s of the blocks (rank 0; every rank times the same
blocks, so the number includes waiting for the slowest rank). `--profile` prints the
cProfile functions and torch operators that take the most time in one more block. `--check N`
prints the total energy after 1 and after N steps instead of timing. `--plain` (one process)
runs the integrator without `DomainParallel`, `NVE(model, dt, skin=skin).run(batch, n)`, the
path a user takes first.
Side by side with nvalchemi-toolkit (issue 22's peer): benchmarks/peer_lj_step.py is the same
job in the peer's API, run from a scratch venv; benchmarks/cpu_vs_peer.py runs both in fresh
processes, interleaved (A, B, A, B). The peer is not a dependency of this repo.
"""

from __future__ import annotations

import cProfile
import io
import pstats
from functools import partial

import torch
from common import fcc_batch, write_json
from lj_job import (
    CUTOFF,
    DT_FS,
    EPSILON,
    LATTICE,
    SIGMA,
    job_arguments,
    median_rate,
    print_check,
    print_header,
    print_row,
)

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, LocalCommunicator
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import LennardJonesModel


def job_system(atoms: int) -> Batch:
    """The job's crystal with its velocities, the full system."""
    return fcc_batch(atoms, LATTICE, (18,), torch.float64, torch.device("cpu"), 60.0)


def job_model() -> LennardJonesModel:
    """The job's Lennard-Jones model (hard cutoff, no shift)."""
    return LennardJonesModel(EPSILON, SIGMA, CUTOFF, shift=False)


def make_run(manager: DistributedManager, atoms: int, skin: float) -> DomainParallel:
    """A partitioned NVE run of the job on this rank (collective)."""
    config = DomainConfig(cutoff=CUTOFF, skin=skin, mesh=manager.mesh)
    run = DomainParallel(NVE(job_model(), DT_FS), config)
    run.partition(job_system(atoms) if manager.rank == 0 else None)
    return run


class PlainRun:
    """`NVE(model, dt, skin=skin).run(batch, n)` in one process, with the part of
    `DomainParallel`'s interface this script reads (`run`, `batch`, `comm`)."""

    def __init__(self, atoms: int, skin: float) -> None:
        self.dynamics = NVE(job_model(), DT_FS, skin=skin)
        self.batch = job_system(atoms)
        self.comm: Communicator = LocalCommunicator()

    def run(self, batch: Batch | None = None, n_steps: int = 0) -> Batch:
        return self.dynamics.run(self.batch if batch is None else batch, n_steps)


def total_energy(run: DomainParallel | PlainRun) -> tuple[float, float, int]:
    """(potential, kinetic, atoms) of the whole system (collective)."""
    batch = run.batch
    kinetic = 0.5 * (batch.atomic_masses * (batch.velocities**2).sum(-1)).sum()
    local = torch.stack([kinetic, torch.tensor(float(batch.num_nodes), dtype=kinetic.dtype)])
    kinetic, atoms = run.comm.all_reduce(local, "sum").tolist()
    return float(batch.energy.sum()), kinetic, int(atoms)  # energy: summed over ranks


def check(run: DomainParallel | PlainRun, steps: int, skin: float, rank: int) -> dict:
    """Total energy after 1 and after `steps` steps (compare with peer_lj_step.py --check)."""
    run.run(n_steps=1)
    first = total_energy(run)
    run.run(n_steps=steps - 1)
    last = total_energy(run)
    return print_check(skin, steps, first, last) if rank == 0 else {}


def profile(run: DomainParallel | PlainRun, steps: int) -> str:
    """cProfile (cumulative) and torch.profiler (self CPU) tables of `steps` steps."""
    profiler = cProfile.Profile()
    profiler.enable()
    run.run(n_steps=steps)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
    with torch.profiler.profile() as prof:
        run.run(n_steps=steps)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
    return text.getvalue() + "\n" + table


def main() -> None:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="print where a step goes")
    parser.add_argument("--plain", action="store_true", help="without DomainParallel")
    args = parser.parse_args()
    torch.set_num_threads(1)
    manager = DistributedManager.initialize(device="cpu")
    if args.plain and manager.world_size > 1:
        raise SystemExit("--plain runs one process: start it without torchrun")
    rows = []
    if manager.rank == 0:
        how = "NVE(model).run without DomainParallel" if args.plain else "DomainParallel"
        title = f"# Ar LJ NVE, float64, {manager.world_size} rank(s), 1 thread each, {how}"
        print_header(title, bool(args.check))
    try:
        for atoms in args.atoms:
            for skin in args.skin:
                run = PlainRun(atoms, skin) if args.plain else make_run(manager, atoms, skin)
                if args.check:
                    rows.append(check(run, args.check, skin, manager.rank))
                    continue
                rate = median_rate(partial(run.run, None), run.comm.barrier, args)
                n = int(run.comm.all_reduce(torch.tensor([run.batch.num_nodes]), "sum")[0])
                rows.append({"atoms": n, "skin": skin, "steps_per_s": rate})
                if manager.rank == 0:
                    print_row(n, skin, rate, manager.world_size)
                if args.profile:
                    report = profile(run, args.steps)
                    if manager.rank == 0:
                        print(report, flush=True)
        if manager.rank == 0:
            write_json(args.json, {"args": vars(args), "ranks": manager.world_size, "rows": rows})
    finally:
        DistributedManager.cleanup()


if __name__ == "__main__":
    main()
