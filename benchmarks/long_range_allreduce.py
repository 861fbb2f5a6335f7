"""What the reciprocal-space sums cost under domain decomposition: the all-reduce per step.

    OMP_NUM_THREADS=1 python benchmarks/long_range_allreduce.py [--ranks 2 4]

Ewald all-reduces 2 K + 1 numbers per evaluation (cos and sin structure factors of K
half-space k-vectors, and the net charge), PME n1 n2 n3 + 1 (the charge mesh and the net
charge); the backward all-reduces as many. Printed: those sizes for rock-salt NaCl at
several accuracies and mesh spacings, and the time of one float64 gloo all-reduce of each
size between real processes on this machine (median of `--repeats`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from common import write_json

from nvdd_plugins.models import PME, Ewald
from nvdd_plugins.models.ewald import half_space_miller_indices

CUTOFF = 6.0  # Å


def _sizes(cells: int) -> list[tuple[str, int]]:
    """(label, numbers all-reduced) for NaCl of `cells`³ rock-salt cells (a = 5.64 Å)."""
    cell = torch.eye(3, dtype=torch.float64) * 5.64 * cells
    rows = []
    for accuracy in (1e-4, 1e-6, 1e-8):
        ewald = Ewald.for_accuracy(CUTOFF, accuracy)
        k = half_space_miller_indices(cell, ewald.k_cutoff).shape[0]
        rows.append((f"Ewald {accuracy:.0e}: K = {k}", 2 * k + 1))
    alpha = Ewald.for_accuracy(CUTOFF, 1e-6).alpha
    for spacing in (0.8, 0.5, 0.3):
        mesh = PME.for_cell(alpha, cell, spacing).mesh
        rows.append(
            (f"PME {spacing} Å: {'x'.join(map(str, mesh))}", mesh[0] * mesh[1] * mesh[2] + 1)
        )
    return rows


def _worker(rank: int, world: int, store: str, sizes: list[int], repeats: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    times = {}
    for size in sizes:
        tensor = torch.ones(size, dtype=torch.float64)
        samples = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            samples.append(time.perf_counter() - start)
        times[size] = statistics.median(samples)
    if rank == 0:
        torch.save(times, out)
    dist.barrier()
    dist.destroy_process_group()


def all_reduce_times(world: int, sizes: list[int], repeats: int) -> dict[int, float]:
    """Median seconds of one float64 all-reduce of each size over `world` gloo processes."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.pt")
        args = (world, os.path.join(tmp, "store"), sizes, repeats, out)
        mp.start_processes(_worker, args=args, nprocs=world, start_method="fork")
        return torch.load(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[3, 6])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    rows = [(cells, label, size) for cells in args.cells for label, size in _sizes(cells)]
    sizes = sorted({size for _, _, size in rows})
    times = {world: all_reduce_times(world, sizes, args.repeats) for world in args.ranks}
    header = " ".join(f"{f'{w} ranks [ms]':>13}" for w in args.ranks)
    print(f"{'ions':>5} {'method':<28} {'floats':>8} {'MB':>7} {header}")
    for cells, label, size in rows:
        columns = " ".join(f"{1e3 * times[w][size]:13.3f}" for w in args.ranks)
        print(f"{8 * cells**3:5d} {label:<28} {size:8d} {8 * size / 1e6:7.3f} {columns}")
    write_json(
        args.json,
        {
            "args": vars(args),
            "rows": [{"ions": 8 * c**3, "method": m, "floats": s} for c, m, s in rows],
            "seconds": {str(w): {str(s): t for s, t in v.items()} for w, v in times.items()},
        },
    )


if __name__ == "__main__":
    main()
