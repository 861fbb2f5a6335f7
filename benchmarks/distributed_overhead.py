"""DistributedModel at one rank vs the bare model, eager vs compile=True, ghost fractions.

    python benchmarks/distributed_overhead.py --models lj mpnn --sizes 4000 32000
    python benchmarks/distributed_overhead.py --models lj mace --sizes 100000 --device cuda \\
        --dtype float32 --compile --json out.json

"bare" is the single-process evaluation (energy + forces) on a Verlet list with the same
skin, "DD@1" the DistributedModel on one rank, both at steady state (no rebuild) and measured
side by side in this run. With --compile the compiled DistributedModel is timed too, and the
number of graphs compiled after its warm-up is reported (0 = no recompiles). The rebuild
columns time what a neighbour-list rebuild adds to a step: the bare model's list at cutoff +
skin, and DD@1's halo view (ghost selection, plan and list). The ghost table
gives the ghost/owned ratio per rank of a simulated decomposition at --ranks.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from common import fcc_batch, mace_model, median_seconds, write_json
from torch._dynamo.utils import counters

from nvdd_plugins import Batch, DistributedModel, DomainConfig
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.geometry import build_neighbor_list
from nvdd_plugins.models import LennardJonesModel, MACEWrapper, ModelEvaluator, SimpleMPNN

# model name -> (factory(dtype), fcc lattice constant Å, species)
MODELS = {
    "lj": (lambda dtype: LennardJonesModel(0.0104, 3.4, 8.5, shift=True), 5.26, (18,)),
    "mpnn": (lambda dtype: SimpleMPNN(cutoff=5.0, hidden=32).to(dtype), 3.61, (29,)),
    "mace": (lambda dtype: MACEWrapper(mace_model("small", (29,), dtype)), 3.61, (29,)),
    "mace-tiny": (lambda dtype: MACEWrapper(mace_model("tiny", (29,), dtype)), 3.61, (29,)),
}


def _owned(batch: Batch) -> Batch:
    owned = batch.copy()
    owned.add_node_property("global_ids", torch.arange(owned.num_nodes, device=batch.device))
    return owned


def compare(
    model, batch: Batch, skin: float, repeats: int, compile_: bool, mode: str | None = None
) -> dict:
    """Step times of the bare model, DistributedModel at one rank and, optionally, compiled."""
    device = batch.device
    bare = ModelEvaluator(model, skin)
    row = {"atoms": batch.num_nodes, "bare_s": median_seconds(lambda: bare(batch), repeats, device)}
    distributed = DistributedModel(model, DomainConfig(cutoff=model.cutoff, skin=skin))
    owned = _owned(batch)
    distributed.setup(owned)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    row["dd_s"] = median_seconds(lambda: distributed(owned), repeats, device)
    row["ratio"] = row["dd_s"] / row["bare_s"]
    if device.type == "cuda":
        row["peak_bytes_per_atom"] = torch.cuda.max_memory_allocated(device) / batch.num_nodes
    positions, cell, pbc = batch.positions, batch.cell[0], batch.pbc[0]
    row["bare_rebuild_s"] = median_seconds(
        lambda: build_neighbor_list(positions, cell, pbc, model.cutoff + skin), repeats, device
    )
    row["dd_rebuild_s"] = median_seconds(lambda: distributed.domain.build(owned), repeats, device)
    if compile_:
        config = DomainConfig(cutoff=model.cutoff, skin=skin, compile=True, compile_mode=mode)
        compiled = DistributedModel(model, config)
        owned = _owned(batch)
        compiled.setup(owned)
        for _ in range(3):
            compiled(owned)
        graphs = counters["stats"]["unique_graphs"]
        row["compiled_s"] = median_seconds(lambda: compiled(owned), repeats, device, warmup=0)
        row["compile_speedup"] = row["dd_s"] / row["compiled_s"]
        row["recompiles_after_warmup"] = counters["stats"]["unique_graphs"] - graphs
    return row


def profile(model, batch: Batch, skin: float) -> None:
    """Print the operators taking the most host time in one bare and one DD@1 evaluation."""
    bare = ModelEvaluator(model, skin)
    distributed = DistributedModel(model, DomainConfig(cutoff=model.cutoff, skin=skin))
    owned = _owned(batch)
    distributed.setup(owned)
    for label, fn in (("bare", lambda: bare(batch)), ("DD@1", lambda: distributed(owned))):
        fn()
        with torch.profiler.profile() as prof:
            fn()
        print(f"--- {label}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def ghost_fractions(n_atoms: int, world_size: int, cutoff: float, skin: float) -> dict:
    """Ghost/owned ratio per rank of a simulated decomposition of an fcc argon crystal."""
    batch = fcc_batch(n_atoms, 5.26, (18,), torch.float64, torch.device("cpu"))
    model = LennardJonesModel(0.0104, 3.4, cutoff)

    def per_rank(comm):
        distributed = DistributedModel(model, DomainConfig(cutoff=cutoff, skin=skin, mesh=comm))
        distributed.setup(batch)
        ids = distributed.domain.select_owned(batch.positions, batch.cell[0])
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
    parser.add_argument("--models", nargs="+", default=["lj", "mpnn"], choices=sorted(MODELS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 32000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--skin", type=float, default=0.5, help="Verlet skin, Å")
    parser.add_argument("--compile", action="store_true", help="also time compile=True")
    parser.add_argument(
        "--compile-mode", help="torch.compile mode, e.g. max-autotune-no-cudagraphs"
    )
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4, 8])
    parser.add_argument("--profile", action="store_true", help="print where DD@1 spends time")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    print(f"# {args.device} {args.dtype}, skin {args.skin} Å, energy + forces per step")
    print(
        f"{'model':>9} {'atoms':>8} {'bare[s]':>9} {'DD@1[s]':>9} {'ratio':>6}"
        + f" {'rebuild bare[s]':>15} {'rebuild DD@1[s]':>15}"
        + (f" {'compiled[s]':>11} {'speedup':>7} {'recompiles':>10}" if args.compile else "")
    )
    results: dict = {"args": vars(args), "overhead": [], "ghosts": []}
    for name in args.models:
        factory, lattice, species = MODELS[name]
        model = factory(dtype).to(device)
        for size in args.sizes:
            batch = fcc_batch(size, lattice, species, dtype, device)
            row = compare(model, batch, args.skin, args.repeats, args.compile, args.compile_mode)
            row = {"model": name, **row}
            if args.profile:
                profile(model, batch, args.skin)
            results["overhead"].append(row)
            line = (
                f"{name:>9} {row['atoms']:8d} {row['bare_s']:9.4f} {row['dd_s']:9.4f} "
                f"{row['ratio']:6.3f} {row['bare_rebuild_s']:15.4f} {row['dd_rebuild_s']:15.4f}"
            )
            if args.compile:
                line += (
                    f" {row['compiled_s']:11.4f} {row['compile_speedup']:7.2f} "
                    f"{row['recompiles_after_warmup']:10d}"
                )
            print(line, flush=True)
    if args.ranks:
        size = max(args.sizes)
        print(
            f"\n{'ranks':>6} {'grid':>10} {'ghost/owned':>12} {'max':>7}   "
            f"(fcc Ar, {size} atoms, cutoff 8.5 + skin {args.skin} Å)"
        )
        for world_size in args.ranks:
            row = ghost_fractions(size, world_size, 8.5, args.skin)
            results["ghosts"].append(row)
            print(
                f"{world_size:6d} {tuple(row['grid'])!s:>10} "
                f"{row['mean_ghost_per_owned']:12.3f} {row['max_ghost_per_owned']:7.3f}",
                flush=True,
            )
    write_json(args.json, results)


if __name__ == "__main__":
    main()
