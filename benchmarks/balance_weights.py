"""Owned atoms or rows as the balanced cost: for the systems of `balance.py` at 4, 8 and 16
ranks, max / mean owned atoms and rows (owned + ghost), and the busiest rank's rows, after
re-balancing the initial positions by each cost as `HaloDomain` does at rebuilds (at most
six times, until the cost is within the threshold or new cuts would not lower the busiest
rank's); then the slab balanced by atoms on every grid of 4 ranks.

    OMP_NUM_THREADS=1 python benchmarks/balance_weights.py [--json out.json]

Counts only, one process: they do not depend on the machine.
"""

from __future__ import annotations

import argparse

import torch
from balance import CUTOFF, RANKS, SKIN, THRESHOLD
from balance_systems import SYSTEMS
from common import write_json

from nvdd_plugins import Batch
from nvdd_plugins.decomposition import (
    DecompositionFrame,
    SpatialPartitioner,
    imbalance,
    in_one_process,
    owned_counts,
    rebalanced,
    row_counts,
)

COSTS = {"atoms": owned_counts, "rows": row_counts}


def converged(frame: DecompositionFrame, positions: torch.Tensor, size: int, cost) -> dict:
    """Re-balance by `cost` from the regular grid; the shares it ends with."""
    partitioner = SpatialPartitioner(frame, size, None, CUTOFF + SKIN)
    rebalances = 0

    def cost_of(candidate: SpatialPartitioner) -> torch.Tensor:
        return cost(candidate, positions, in_one_process)

    for _ in range(6):
        costs = cost_of(partitioner)
        cuts = rebalanced(partitioner, positions, costs, THRESHOLD, in_one_process, None, cost_of)
        if cuts is None:
            break
        partitioner = SpatialPartitioner(frame, size, None, CUTOFF + SKIN, cuts)
        rebalances += 1
    owned = owned_counts(partitioner, positions, in_one_process)
    rows = row_counts(partitioner, positions, in_one_process)
    return {"owned": imbalance(owned), "rows": imbalance(rows), "max_rows": int(rows.max()),
            "rebalances": rebalances, "grid": partitioner.grid}  # fmt: skip


def slab_grids(size: int = 4) -> dict:
    """Owned atoms and rows per rank of the slab balanced by atoms on every grid of `size`
    ranks: which grid holds the fewest rows on its busiest rank."""
    batch = Batch.from_atoms(SYSTEMS["slab"]())
    positions = batch.positions
    frame = DecompositionFrame.from_system(positions, batch.cell[0], batch.pbc[0])
    report = {}
    for px in range(1, size + 1):
        for py in range(1, size // px + 1):
            if size % (px * py):
                continue
            grid = (px, py, size // (px * py))
            regular = SpatialPartitioner(frame, size, grid, CUTOFF + SKIN)
            counts = owned_counts(regular, positions, in_one_process)
            cuts = rebalanced(regular, positions, counts, 1.0, in_one_process, grid)
            balanced = SpatialPartitioner(frame, size, None, CUTOFF + SKIN, cuts)
            owned = owned_counts(balanced, positions, in_one_process).int().tolist()
            rows = row_counts(balanced, positions, in_one_process).int().tolist()
            report[str(grid)] = {"owned": owned, "rows": rows}
            print(f"slab, grid {grid}: owned {owned}, rows {rows}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    results: dict = {}
    print(f"{'system':<14} {'ranks':>5} {'cost':>5} {'owned max/mean':>14} "
          f"{'rows max/mean':>13} {'max rows':>8} {'rebalances':>10}  grid")  # fmt: skip
    for name in args.systems:
        batch = Batch.from_atoms(SYSTEMS[name]())
        positions = batch.positions
        frame = DecompositionFrame.from_system(positions, batch.cell[0], batch.pbc[0])
        results[name] = {}
        for size in RANKS:
            results[name][size] = {}
            for weight, cost in COSTS.items():
                row = converged(frame, positions, size, cost)
                results[name][size][weight] = row
                print(f"{name:<14} {size:>5} {weight:>5} {row['owned']:>14.3f} "
                      f"{row['rows']:>13.3f} {row['max_rows']:>8} {row['rebalances']:>10}  "
                      f"{row['grid']}")  # fmt: skip
    results["slab_grids_4_ranks"] = slab_grids()
    write_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
