"""MACE (float32) step time, throughput and memory on one device, up to the largest system.

    python benchmarks/mace_scaling.py --device cuda --sizes 10000 100000 --largest

For each size: the bare model and DistributedModel at one rank (energy + forces, steady
state, Verlet skin --skin, default 0: MACE's memory grows with the pair count, and a list
rebuild costs little next to a MACE step), atom-steps/s and peak memory per atom.
--largest then grows the system by --growth until the device runs out of memory and reports
the last size that fit.
"""

from __future__ import annotations

import argparse

import torch
from common import fcc_batch, mace_model, median_seconds, write_json

from nvdd_plugins import DistributedModel, DomainConfig
from nvdd_plugins.models import MACEWrapper, ModelEvaluator


def measure(
    wrapper: MACEWrapper,
    n_atoms: int,
    device: torch.device,
    repeats: int,
    bare: bool,
    skin: float,
) -> dict:
    """Step times (s), throughput and peak memory of one size."""
    batch = fcc_batch(n_atoms, 3.61, (29,), torch.float32, device)
    row: dict = {"atoms": batch.num_nodes}
    if bare:
        evaluator = ModelEvaluator(wrapper, skin)
        row["bare_s"] = median_seconds(lambda: evaluator(batch), repeats, device)
        del evaluator
    owned = batch.copy()
    owned.add_node_property("global_ids", torch.arange(owned.num_nodes, device=device))
    distributed = DistributedModel(wrapper, DomainConfig(cutoff=wrapper.cutoff, skin=skin))
    distributed.setup(owned)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    row["dd_s"] = median_seconds(lambda: distributed(owned), repeats, device)
    row["atom_steps_per_s"] = row["atoms"] / row["dd_s"]
    if bare:
        row["ratio"] = row["dd_s"] / row["bare_s"]
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        row["peak_gib"] = peak / 2**30
        row["bytes_per_atom"] = peak / row["atoms"]
    return row


def _print(row: dict) -> None:
    bare = f"{row['bare_s']:9.4f} {row['ratio']:6.3f}" if "bare_s" in row else f"{'-':>9} {'-':>6}"
    memory = f"{row.get('peak_gib', float('nan')):8.2f} {row.get('bytes_per_atom', 0) / 1024:9.1f}"
    print(
        f"{row['atoms']:9d} {bare} {row['dd_s']:9.4f} {row['atom_steps_per_s']:12.0f} {memory}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--preset", default="small", choices=["small", "tiny"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--largest", action="store_true", help="grow until out of memory")
    parser.add_argument("--growth", type=float, default=1.15)
    parser.add_argument("--skin", type=float, default=0.0, help="Verlet skin, Å (memory!)")
    parser.add_argument("--max-trials", type=int, default=8)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    device = torch.device(args.device)
    wrapper = MACEWrapper(mace_model(args.preset, (29,), torch.float32)).to(device)
    print(
        f"# MACE {args.preset} float32 on {device}, fcc Cu, r_max 5 Å, skin {args.skin} Å, "
        "energy + forces"
    )
    print(
        f"{'atoms':>9} {'bare[s]':>9} {'ratio':>6} {'DD@1[s]':>9} {'atom-steps/s':>12} "
        f"{'peak GiB':>8} {'KiB/atom':>9}"
    )
    rows = []
    for size in args.sizes:
        rows.append(measure(wrapper, size, device, args.repeats, True, args.skin))
        _print(rows[-1])
    largest = None
    if args.largest:
        size = max(args.sizes)
        for _ in range(args.max_trials):
            size = int(size * args.growth)
            try:
                row = measure(wrapper, size, device, 1, False, args.skin)
            except torch.OutOfMemoryError:
                print(f"{size:9d} out of memory", flush=True)
                break
            rows.append(row)
            largest = row["atoms"]
            _print(row)
        print(f"largest system that fit: {largest} atoms")
    write_json(args.json, {"args": vars(args), "results": rows, "largest": largest})


if __name__ == "__main__":
    main()
