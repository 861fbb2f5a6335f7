"""Graph partition's rebuild per rank: peak memory and time at 1, 2, 4, 8 gloo ranks.

    nice python benchmarks/graph_partition_memory.py --atoms 100000 --ranks 1 2 4 8

One group of `--ranks` gloo processes on the CPU per rank count and design, each on the
same periodic fcc argon crystal with Lennard-Jones (cutoff 8.5 Å, skin 0.5 Å) under
`StrategyKind.GRAPH_PARTITION`, partitioned by `DomainParallel.partition` from rank 0. Per
rank it measures, for the two designs side by side:

* graph (this design): `--repeats` rebuilds (`SubdomainModel.rebuild`: bins, runs, the
  exchange with near ranks, the neighbour list of its atoms and those near them, plan,
  view), then `--repeats` energy + forces evaluations on that view;
* all-gather (what each rank did before): `--repeats` times gathering every position and
  building the whole system's neighbour list (the list alone, without picking the edges
  that touch its atoms from it: a lower bound of that design's rebuild).

Peak memory is the process's peak resident set over the run (`VmHWM`) above what it held
after its imports, before the system was made (Python and torch, ~300 MB, left out): what
the run needs per rank, the neighbour search's reused output blocks and the view included.
Times are medians of the wall and CPU seconds of one rebuild (or step); with more ranks than
cores the wall times include waiting for a core, the CPU seconds do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from common import fcc_batch, gloo_reports, write_json

from nvdd_plugins import DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.geometry import build_neighbor_list
from nvdd_plugins.models import LennardJonesModel

CUTOFF, SKIN = 8.5, 0.5


def _status_kib(field: str) -> int:
    """A `/proc/self/status` memory field (kB)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Median wall and CPU seconds of `repeats` calls of `fn`."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}


def measure(comm: Communicator, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """This rank's figures for `args.design` (see the module docstring)."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak resident set starts again from the current one
    baseline_kib = _status_kib("VmRSS")
    full = None
    if comm.rank == 0:
        full = fcc_batch(args.atoms, 5.26, (18,), torch.float64, torch.device("cpu"), 50.0)
    model = LennardJonesModel(epsilon=0.0104, sigma=3.4, cutoff=CUTOFF)
    config = DomainConfig(CUTOFF, SKIN, comm, strategy=StrategyKind.GRAPH_PARTITION)
    dd = DomainParallel(NVE(model, 1.0), config)
    owned = dd.partition(full)
    del full
    report: dict[str, Any] = {}
    if args.design == "graph":
        distributed = dd.model
        report["rebuild"] = timed(lambda: distributed.rebuild(owned), args.repeats)
        view = distributed.domain.view
        report["step"] = timed(lambda: distributed(owned), args.repeats)
        report |= {
            "owned": view.n_owned,
            "ghosts": view.n_local - view.n_owned,
            "edges": int(view.edge_index.shape[1]),
        }
    else:
        positions, cell, pbc = owned.positions.detach(), owned.cell[0], owned.pbc[0]

        def gathered_list() -> None:
            everything = torch.cat(comm.all_gather(positions))
            build_neighbor_list(everything, cell, pbc, CUTOFF + SKIN)

        report["rebuild"] = timed(gathered_list, args.repeats)
    report["peak_mib"] = (_status_kib("VmHWM") - baseline_kib) / 1024
    return report


def summarise(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The worst rank of each figure."""
    summary: dict[str, Any] = {}
    for key, value in reports[0].items():
        if isinstance(value, dict):
            summary[key] = {k: max(r[key][k] for r in reports) for k in value}
        else:
            summary[key] = max(r[key] for r in reports)
    return summary


def table(results: dict[str, dict[int, dict[str, Any]]]) -> str:
    """The results as a Markdown table, peaks also against one rank."""
    graph, gathered = results["graph"], results["all_gather"]
    one = graph[min(graph)]["peak_mib"]
    lines = [
        "| ranks | owned | ghosts | edges | peak MiB | / P=1 | rebuild wall s | rebuild CPU s |"
        " step CPU s | all-gather peak MiB | all-gather rebuild CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for ranks, r in sorted(graph.items()):
        old = gathered.get(ranks)
        old_cells = f"{old['peak_mib']:.0f} | {old['rebuild']['cpu_s']:.2f}" if old else "- | -"
        lines.append(
            f"| {ranks} | {r['owned']} | {r['ghosts']} | {r['edges']} | {r['peak_mib']:.0f} | "
            f"{r['peak_mib'] / one:.3f} | {r['rebuild']['wall_s']:.2f} | "
            f"{r['rebuild']['cpu_s']:.2f} | {r['step']['cpu_s']:.2f} | {old_cells} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--designs", nargs="+", default=["graph", "all_gather"])
    parser.add_argument("--port", type=int, default=29611)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results: dict[str, dict[int, dict[str, Any]]] = {"graph": {}, "all_gather": {}}
    # glibc hands large freed blocks back to the system only below its mmap threshold, which
    # otherwise grows with the blocks freed
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 16))
    for design in args.designs:
        for world_size in args.ranks:
            args.design = design
            reports = gloo_reports(world_size, args.port + world_size, measure, args)
            results[design][world_size] = summarise(reports)
            print(f"{design} P={world_size}: {results[design][world_size]}", flush=True)
    print(table(results))
    write_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
