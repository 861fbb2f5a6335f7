"""Neighbour-list build time for fcc copper-like crystals of growing size.

Prints one row per (device, size): atoms, edges per atom, median and minimum build time over
``--repeats`` runs after ``--warmup`` runs. Example::

    python benchmarks/neighbor_list.py --sizes 1000 10000 100000 --device all --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
from common import fcc_crystal, synchronize

from nvdd_plugins.geometry import build_neighbor_list


def time_build(
    positions: torch.Tensor,
    cell: torch.Tensor,
    cutoff: float,
    warmup: int,
    repeats: int,
    max_candidates: int | None = None,
) -> tuple[list[float], int]:
    """Wall-clock seconds of each timed build and the number of edges."""
    edges = 0
    for _ in range(warmup):
        edges = build_neighbor_list(
            positions, cell, True, cutoff, max_candidates=max_candidates
        ).num_edges
    times = []
    for _ in range(repeats):
        synchronize(positions.device)
        start = time.perf_counter()
        nl = build_neighbor_list(positions, cell, True, cutoff, max_candidates=max_candidates)
        synchronize(positions.device)
        times.append(time.perf_counter() - start)
        edges = nl.num_edges
    return times, edges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument(
        "--device", default="all", help="cpu, cuda, cuda:N, or all (cpu plus cuda if present)"
    )
    parser.add_argument("--cutoff", type=float, default=5.0, help="Å")
    parser.add_argument("--lattice", type=float, default=3.61, help="fcc lattice constant, Å")
    parser.add_argument("--rattle", type=float, default=0.05, help="random displacement, Å")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    parser.add_argument(
        "--max-candidates", type=int, help="candidate pairs per chunk (default: the library's)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.device == "all":
        devices = [torch.device("cpu")]
        if torch.cuda.is_available():
            devices.append(torch.device("cuda"))
    else:
        devices = [torch.device(args.device)]
    dtype = getattr(torch, args.dtype)

    header = f"{'device':<8} {'atoms':>9} {'edges/atom':>11} {'median ms':>10} {'min ms':>9}"
    print(
        f"cutoff {args.cutoff} Å, fcc a={args.lattice} Å, {args.dtype}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for device in devices:
        for size in args.sizes:
            positions, cell = fcc_crystal(size, args.lattice, args.rattle, dtype, device)
            times, edges = time_build(
                positions, cell, args.cutoff, args.warmup, args.repeats, args.max_candidates
            )
            n_atoms = positions.shape[0]
            row = {
                "device": str(device),
                "atoms": n_atoms,
                "edges": edges,
                "edges_per_atom": edges / n_atoms,
                "median_ms": 1e3 * statistics.median(times),
                "min_ms": 1e3 * min(times),
                "times_ms": [1e3 * t for t in times],
            }
            rows.append(row)
            print(
                f"{row['device']:<8} {n_atoms:>9} {row['edges_per_atom']:>11.2f} "
                f"{row['median_ms']:>10.2f} {row['min_ms']:>9.2f}",
                flush=True,
            )
    if args.json:
        meta = {
            "cutoff": args.cutoff,
            "lattice": args.lattice,
            "dtype": args.dtype,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "machine": platform.machine(),
            "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "gpu_count": torch.cuda.device_count(),
        }
        with open(args.json, "w") as handle:
            json.dump({"meta": meta, "results": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
