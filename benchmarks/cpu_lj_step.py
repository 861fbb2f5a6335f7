"""Warm MD steps/s of the issue-22 CPU job: Ar Lennard-Jones NVE under `DomainParallel`.

    OMP_NUM_THREADS=1 python benchmarks/cpu_lj_step.py                  # every case, 1 rank
    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 benchmarks/cpu_lj_step.py   # 2 ranks (gloo)
    OMP_NUM_THREADS=1 python benchmarks/cpu_lj_step.py --atoms 2048 --skin 0 --profile

The job: fcc argon (a = 5.26 Å, rattled 0.05 Å, 60 K Maxwell-Boltzmann velocities), LJ
ε 0.0104 eV, σ 3.40 Å, hard cutoff 8.5 Å (no shift), dt 1 fs, float64, one thread per rank.
Per case (atoms × skin) it takes `--warmup` steps, then `--rounds` timed blocks of `--steps`
steps and prints the median steps/s of the blocks (rank 0; every rank times the same
blocks, so the number includes waiting for the slowest rank). `--profile` prints the
cProfile functions and torch operators that take the most time in one more block. `--check N`
prints the total energy after 1 and after N steps instead of timing.
Side by side with nvalchemi-toolkit (issue 22's peer): benchmarks/peer_lj_step.py is the same
job in the peer's API, run from a scratch venv; benchmarks/cpu_vs_peer.py runs both in fresh
processes, interleaved (A, B, A, B). The peer is not a dependency of this repo.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch
from common import fcc_batch, write_json

from nvdd_plugins import DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import LennardJonesModel

EPSILON, SIGMA, CUTOFF, LATTICE, DT_FS = 0.0104, 3.40, 8.5, 5.26, 1.0


def make_run(manager: DistributedManager, atoms: int, skin: float) -> DomainParallel:
    """A partitioned NVE run of the job on this rank (collective)."""
    model = LennardJonesModel(EPSILON, SIGMA, CUTOFF, shift=False)
    config = DomainConfig(cutoff=CUTOFF, skin=skin, mesh=manager.mesh)
    run = DomainParallel(NVE(model, DT_FS), config)
    full = None
    if manager.rank == 0:
        full = fcc_batch(atoms, LATTICE, (18,), torch.float64, torch.device("cpu"), 60.0)
    run.partition(full)
    return run


def steps_per_second(run: DomainParallel, steps: int, rounds: int, warmup: int) -> float:
    """Median steps/s over `rounds` blocks of `steps` steps after `warmup` steps."""
    run.run(n_steps=warmup)
    rates = []
    for _ in range(rounds):
        run.comm.barrier()
        start = time.perf_counter()
        run.run(n_steps=steps)
        rates.append(steps / (time.perf_counter() - start))
    return statistics.median(rates)


def total_energy(run: DomainParallel) -> tuple[float, float, int]:
    """(potential, kinetic, atoms) of the whole system (collective)."""
    batch = run.batch
    kinetic = 0.5 * (batch.atomic_masses * (batch.velocities**2).sum(-1)).sum()
    local = torch.stack([kinetic, torch.tensor(float(batch.num_nodes), dtype=kinetic.dtype)])
    kinetic, atoms = run.comm.all_reduce(local, "sum").tolist()
    return float(batch.energy.sum()), kinetic, int(atoms)  # energy: summed over ranks


def check(run: DomainParallel, steps: int, skin: float, rank: int) -> dict:
    """Total energy after 1 and after `steps` steps (compare with peer_lj_step.py --check)."""
    run.run(n_steps=1)
    first = total_energy(run)
    run.run(n_steps=steps - 1)
    last = total_energy(run)
    if rank == 0:
        for step, (pot, kin, n) in ((1, first), (steps, last)):
            print(
                f"CHECK atoms {n} skin {skin:.2f} step {step:3d} "
                f"E_pot {pot:.15e} E_kin {kin:.15e} E_tot {pot + kin:.15e}"
            )
    return {"atoms": first[2], "skin": skin, "steps": steps, "e_total": sum(last[:2])}


def profile(run: DomainParallel, steps: int) -> str:
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, nargs="+", default=[2048, 4000])
    parser.add_argument("--skin", type=float, nargs="+", default=[0.0, 1.0], help="Å")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=5, help="timed blocks per case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print where a step goes")
    parser.add_argument("--check", type=int, default=0, help="print E_total after N steps")
    parser.add_argument("--json", help="write the results here (rank 0)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    manager = DistributedManager.initialize(device="cpu")
    rows = []
    if manager.rank == 0:
        print(f"# Ar LJ NVE, float64, {manager.world_size} rank(s), 1 thread each")
        if not args.check:
            print(f"{'atoms':>6} {'skin[Å]':>7} {'steps/s':>8} {'ms/step':>8} {'core-µs/atom':>12}")
    try:
        for atoms in args.atoms:
            for skin in args.skin:
                run = make_run(manager, atoms, skin)
                if args.check:
                    rows.append(check(run, args.check, skin, manager.rank))
                    continue
                rate = steps_per_second(run, args.steps, args.rounds, args.warmup)
                n = int(run.comm.all_reduce(torch.tensor([run.batch.num_nodes]), "sum")[0])
                rows.append({"atoms": n, "skin": skin, "steps_per_s": rate})
                if manager.rank == 0:
                    per_atom = 1e6 / rate / n * manager.world_size
                    print(f"{n:6d} {skin:7.2f} {rate:8.2f} {1e3 / rate:8.2f} {per_atom:12.2f}")
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
