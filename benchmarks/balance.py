"""Load balance: owned atoms per rank (max / mean) with the regular grid and with
`balance="auto"`, and the time per step of real gloo runs, balanced vs `balance="off"`.

    OMP_NUM_THREADS=1 python benchmarks/balance.py                 # everything (a few minutes)
    OMP_NUM_THREADS=1 python benchmarks/balance.py --timing-steps 0   # counts only

Systems (Cu, Lennard-Jones ε 0.167 eV, σ 2.315 Å, cutoff 5.5 Å shifted, skin 0.5 Å):
a Cu(111) slab of 8 layers with 30 Å of vacuum; a particle off-centre in a periodic box; a
liquid/vapour box (a dense slab at 1500 K, vapour at 1/20 of its density); an octahedral
cluster with open boundaries; a droplet on a surface given an outward lateral velocity, so
that it spreads during the run (the cuts must follow it).

Counts: each system runs `--steps` NVE steps in one process (dt 2 fs). Ownership is replayed
for 4, 8 and 16 ranks along that trajectory with the functions `HaloDomain` uses: at
partition, and at every neighbour-list rebuild (an atom moved more than skin / 2 since the
last one), "auto" re-balances when max / mean exceeds the threshold (1.05); owners change
only there. Printed: max / mean with the regular grid and with "auto" after partition, the
largest with "auto" over the run, and the regular grid's at the end.

Timing: `--timing-ranks` gloo processes run the slab (`--timing-side`, `--timing-model`:
Lennard-Jones, the tests' SimpleMPNN, the same MPNN declaring `edge_target_row=0` so that
ranks drop the edges into their ghost rows, or a tiny e3nn MACE, which needs mace-torch),
`balance="off"` and "auto" built side by side in each rank and stepped in alternation
(blocks of `--timing-steps` steps), medians of `--rounds` blocks. Every rank waits for the
slowest, so a step takes as long as the busiest rank. The gloo numbers need one free core
per rank; on a loaded machine they are noisy (the load average is printed with them).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time

import torch
import torch.multiprocessing as mp
from balance_systems import SYSTEMS, slab
from common import write_json

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.decomposition import (
    DecompositionFrame,
    SpatialPartitioner,
    imbalance,
    in_one_process,
    owned_counts,
    rebalanced,
)
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import (
    LennardJonesModel,
    MACEArchitecture,
    MACEWrapper,
    SimpleMPNN,
    random_mace,
)
from nvdd_plugins.spec import MLIPSpec

EPSILON, SIGMA, CUTOFF, SKIN, DT_FS = 0.167, 2.315, 5.5, 0.5, 2.0
THRESHOLD = DomainConfig(cutoff=CUTOFF).balance_threshold
RANKS = (4, 8, 16)


class OwnedEdgesMPNN(SimpleMPNN):
    """`SimpleMPNN` declaring what MACE's, NequIP's and SevenNet's specs declare: every
    aggregation writes onto row 0 of `edge_index` (its receivers), so a rank drops the edges
    into its ghost rows (their features come from the per-layer exchange). The runner
    checks the claim on the first forward against one on every edge."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        """`SimpleMPNN`'s spec with `edge_target_row=0`."""
        spec = super().distribution_spec(strategy)
        if spec is None:
            return None
        distribution = dataclasses.replace(spec.distribution, edge_target_row=0)
        return dataclasses.replace(spec, distribution=distribution)


TIMING_MODELS = ("lj", "mpnn", "mpnn-owned-edges", "mace")


def _model(name: str = "lj") -> torch.nn.Module:
    """The count replay's Lennard-Jones, or a timing model of `TIMING_MODELS`."""
    if name == "mpnn":  # the tests' tiny 3-layer MPNN (random weights)
        return SimpleMPNN(cutoff=CUTOFF, hidden=16, n_layers=3, seed=7).double()
    if name == "mpnn-owned-edges":
        return OwnedEdgesMPNN(cutoff=CUTOFF, hidden=16, n_layers=3, seed=7).double()
    if name == "mace":  # tiny e3nn MACE: 2 interactions, 8x0e+8x1o, max_ell 2 (random weights)
        architecture = MACEArchitecture(avg_num_neighbors=40.0)
        return MACEWrapper(random_mace([29], r_max=CUTOFF, architecture=architecture))
    return LennardJonesModel(epsilon=EPSILON, sigma=SIGMA, cutoff=CUTOFF, shift=True)


class Replay:
    """Ownership of one rank count along a trajectory: the regular grid, and the cuts
    "auto" moves at partition and at rebuilds."""

    def __init__(self, positions: torch.Tensor, cell: torch.Tensor, pbc: torch.Tensor, size: int):
        frame = DecompositionFrame.from_system(positions, cell, pbc)
        self.regular = self.balanced = SpatialPartitioner(frame, size, None, CUTOFF + SKIN)
        self.rebalances = 0
        self.rebuild(positions)
        self.after_partition = self.now(positions)
        self.worst = self.after_partition[1]

    def rebuild(self, positions: torch.Tensor) -> None:
        """The "auto" decision at a neighbour-list rebuild (one process: no reduction)."""
        counts = owned_counts(self.balanced, positions, in_one_process)
        cuts = rebalanced(self.balanced, positions, counts, THRESHOLD, in_one_process)
        if cuts is not None:
            frame, size = self.balanced.frame, self.balanced.world_size
            self.balanced = SpatialPartitioner(frame, size, None, CUTOFF + SKIN, cuts)
            self.rebalances += 1

    def now(self, positions: torch.Tensor) -> tuple[float, float]:
        """max / mean owned atoms: regular grid, balanced."""
        return tuple(
            imbalance(owned_counts(p, positions, in_one_process))
            for p in (self.regular, self.balanced)
        )


def count_system(name: str, steps: int) -> dict:
    """Owned-atom balance of one system at every rank count of `RANKS` along `steps` steps."""
    atoms = SYSTEMS[name]()
    batch = Batch.from_atoms(atoms)
    cell, pbc = batch.cell[0], batch.pbc[0]
    replays = {size: Replay(batch.positions, cell, pbc, size) for size in RANKS}
    integrator = NVE(_model(), DT_FS, skin=SKIN)
    reference = batch.positions.clone()
    start = time.perf_counter()
    for _ in range(steps):
        integrator.step(batch)
        if float((batch.positions - reference).norm(dim=1).max()) > SKIN / 2:
            reference = batch.positions.clone()
            for replay in replays.values():  # owners change only at rebuilds
                replay.rebuild(batch.positions)
                replay.worst = max(replay.worst, replay.now(batch.positions)[1])
    rows = {
        size: {"regular_after_partition": r.after_partition[0],
               "auto_after_partition": r.after_partition[1],
               "regular_end_of_run": r.now(batch.positions)[0], "auto_worst_in_run": r.worst,
               "rebalances": r.rebalances, "grid": r.balanced.grid}
        for size, r in replays.items()
    }  # fmt: skip
    return {"atoms": len(atoms), "md_seconds": time.perf_counter() - start, "ranks": rows}


def _timed(comm, args: argparse.Namespace) -> dict[str, float]:
    """Per-step seconds of the slab with balance "off" and "auto", alternating blocks."""
    runs, steps = {}, args.timing_steps
    for mode in ("off", "auto"):
        config = DomainConfig(cutoff=CUTOFF, skin=SKIN, mesh=comm, balance=mode)
        dynamics = NVE(_model(args.timing_model), args.timing_dt, skin=SKIN)
        dd = DomainParallel(dynamics, config, steps)
        dd.partition(Batch.from_atoms(slab(args.timing_side)) if comm.rank == 0 else None)
        dd.run(n_steps=2)  # warm-up: first forces, native kernels
        runs[mode] = dd
    times: dict[str, list[float]] = {mode: [] for mode in runs}
    for _ in range(args.rounds):
        for mode, dd in runs.items():
            comm.barrier()
            start = time.perf_counter()
            dd.run(n_steps=steps)
            comm.barrier()
            times[mode].append((time.perf_counter() - start) / steps)
    owned = {mode: dd.batch.num_nodes for mode, dd in runs.items()}
    rows = {mode: dd.model.domain.view.n_rows for mode, dd in runs.items()}
    grid = {mode: dd.model.domain.partitioner.grid for mode, dd in runs.items()}
    medians = {m: statistics.median(t) for m, t in times.items()}
    return {**medians, "owned": owned, "rows": rows, "grid": grid}


def _spawned(rank: int, size: int, port: int, args: argparse.Namespace, out: str) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    manager = DistributedManager.initialize(device="cpu")
    result = _timed(manager.mesh, args)
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    DistributedManager.cleanup()


def timing(args: argparse.Namespace) -> dict:
    """The slab on `--timing-ranks` gloo processes, "off" vs "auto"."""
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(
            _spawned,
            args=(args.timing_ranks, args.port, args, out),
            nprocs=args.timing_ranks,
            start_method="spawn",
        )
        reports = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(args.timing_ranks)]
    owned = {mode: [r["owned"][mode] for r in reports] for mode in ("off", "auto")}
    rows = {mode: [r["rows"][mode] for r in reports] for mode in ("off", "auto")}
    grid = reports[0]["grid"]
    off, auto = reports[0]["off"], reports[0]["auto"]
    return {
        "ranks": args.timing_ranks,
        "model": args.timing_model,
        "atoms": len(slab(args.timing_side)),
        "seconds_per_step": {"off": off, "auto": auto},
        "speedup": off / auto,
        "owned": owned,
        "rows": rows,
        "grid": grid,
        "load_average_before": load,
        "load_average_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="MD steps of the count replay")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--timing-ranks", type=int, default=4)
    parser.add_argument("--timing-steps", type=int, default=10, help="0: no timing")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timing-model", default="lj", choices=TIMING_MODELS)
    parser.add_argument("--timing-side", type=int, default=12, help="slab atoms per layer edge")
    parser.add_argument("--timing-dt", type=float, default=DT_FS, help="fs")
    parser.add_argument("--port", type=int, default=29611)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    results: dict = {"counts": {}}
    print(f"owned atoms max/mean (threshold {THRESHOLD}); {args.steps} NVE steps")
    print(f"{'system':<14} {'atoms':>6} {'ranks':>5} {'regular':>8} {'auto':>6} "
          f"{'auto worst':>10} {'regular end':>11} {'rebalances':>10}  grid")  # fmt: skip
    for name in args.systems:
        report = count_system(name, args.steps)
        results["counts"][name] = report
        for size, row in report["ranks"].items():
            print(
                f"{name:<14} {report['atoms']:>6} {size:>5} "
                f"{row['regular_after_partition']:>8.2f} {row['auto_after_partition']:>6.3f} "
                f"{row['auto_worst_in_run']:>10.3f} {row['regular_end_of_run']:>11.2f} "
                f"{row['rebalances']:>10}  {row['grid']}"
            )
    if args.timing_steps > 0:
        report = timing(args)
        results["timing"] = report
        per_step = report["seconds_per_step"]
        print(
            f"slab ({report['atoms']} atoms, {report['model']}) on {report['ranks']} gloo "
            f"ranks: off {per_step['off'] * 1e3:.1f} ms/step, "
            f"auto {per_step['auto'] * 1e3:.1f} ms/step, speed-up {report['speedup']:.2f}x; "
            f"owned off {report['owned']['off']}, auto {report['owned']['auto']}; "
            f"rows off {report['rows']['off']}, auto {report['rows']['auto']}; "
            f"grid off {report['grid']['off']}, auto {report['grid']['auto']}; "
            f"load average {report['load_average_before'][0]:.1f} -> "
            f"{report['load_average_after'][0]:.1f} on {report['cpu_count']} CPUs"
        )
    write_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
