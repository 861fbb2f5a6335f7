"""DistributedModel overhead at one rank, and ghost fractions at 2/4/8 (simulated) ranks.

    python benchmarks/distributed_overhead.py [--sizes 4000 32000] [--device cpu] [--json out.json]

Row "ratio" = DistributedModel step time / bare model step time, both at steady state (no
neighbour-list rebuild), measured side by side in this run. The ghost table gives, per rank
count, the mean and max ghost/owned ratio over ranks.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
from neighbor_list import fcc_crystal

from nvdd_plugins import Batch, DistributedModel, DomainConfig
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import LennardJonesModel, SimpleMPNN, evaluate_model
from nvdd_plugins.models.evaluate import attach_neighbor_list


def make_batch(n_atoms: int, dtype: torch.dtype, device: torch.device) -> Batch:
    """An fcc argon-like crystal of about `n_atoms` atoms."""
    positions, cell = fcc_crystal(n_atoms, 5.26, 0.1, dtype, device)
    n = positions.shape[0]
    return Batch(
        {"positions": positions, "atomic_numbers": torch.full((n,), 18, device=device)},
        {},
        {"cell": cell.unsqueeze(0), "pbc": torch.ones(1, 3, dtype=torch.bool, device=device)},
        torch.tensor([0, n], device=device),
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, repeats: int, device: torch.device) -> float:
    """Median wall time (s) of `fn()` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def overhead(model, n_atoms: int, repeats: int, device: torch.device, dtype: torch.dtype) -> dict:
    """Bare model vs DistributedModel (1 rank), energy + forces, steady state."""
    batch = make_batch(n_atoms, dtype, device)
    bare_batch = batch.to()
    attach_neighbor_list(bare_batch, model.cutoff)
    bare = timed(lambda: evaluate_model(model, bare_batch), repeats, device)
    owned = batch.to()
    owned.add_node_property("global_ids", torch.arange(owned.num_nodes, device=device))
    distributed = DistributedModel(model, DomainConfig(cutoff=model.cutoff, skin=0.5))
    distributed.setup(owned)
    dd = timed(lambda: distributed(owned), repeats, device)
    return {"atoms": owned.num_nodes, "bare_s": bare, "dd_s": dd, "ratio": dd / bare}


def ghost_fractions(n_atoms: int, world_size: int, cutoff: float, skin: float) -> dict:
    """Ghost/owned ratio per rank of a simulated decomposition."""
    batch = make_batch(n_atoms, torch.float64, torch.device("cpu"))
    model = LennardJonesModel(0.0104, 3.4, cutoff)

    def per_rank(comm):
        distributed = DistributedModel(model, DomainConfig(cutoff=cutoff, skin=skin, mesh=comm))
        distributed.setup(batch)
        ids = distributed.domain.select_owned(batch.positions)
        owned = batch.select_nodes(ids)
        owned.add_node_property("global_ids", ids)
        view = distributed.domain.build(owned)
        return view.n_owned, view.plan.n_ghost, distributed.domain.partitioner.grid

    rows = run_simulated(world_size, per_rank, timeout=600)
    ratios = [g / max(o, 1) for o, g, _ in rows]
    return {
        "ranks": world_size,
        "grid": list(rows[0][2]),
        "mean_ghost_per_owned": statistics.mean(ratios),
        "max_ghost_per_owned": max(ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 32000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    models = {
        "lj": LennardJonesModel(0.0104, 3.4, 8.5, shift=True),
        "mpnn": SimpleMPNN(cutoff=5.0, hidden=32).to(dtype),
    }
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()} "
        f"torch {torch.__version__} threads {torch.get_num_threads()} {device} {args.dtype}"
    )
    print(f"{'model':>6} {'atoms':>8} {'bare[s]':>10} {'DD@1[s]':>10} {'ratio':>7}")
    results = {"overhead": [], "ghosts": []}
    for name, model in models.items():
        model = model.to(device)
        for size in args.sizes:
            row = {"model": name, **overhead(model, size, args.repeats, device, dtype)}
            results["overhead"].append(row)
            print(
                f"{name:>6} {row['atoms']:8d} {row['bare_s']:10.4f} {row['dd_s']:10.4f} "
                f"{row['ratio']:7.3f}",
                flush=True,
            )
    print(
        f"\n{'ranks':>6} {'grid':>10} {'ghost/owned mean':>17} {'max':>7}   "
        f"({max(args.sizes)} atoms, cutoff 8.5 + skin 0.5 Å)"
    )
    for world_size in args.ranks:
        row = ghost_fractions(max(args.sizes), world_size, 8.5, 0.5)
        results["ghosts"].append(row)
        print(
            f"{world_size:6d} {tuple(row['grid'])!s:>10} "
            f"{row['mean_ghost_per_owned']:17.3f} {row['max_ghost_per_owned']:7.3f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
