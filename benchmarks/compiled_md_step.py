"""compile=True against eager: the MD step of MACE on one GPU, with and without CUDA graphs.

    python benchmarks/compiled_md_step.py --atoms 10976 108000 --json compiled.json

For each fcc Cu crystal (MACE "small", random weights, cuEquivariance unless --backend
e3nn, float32, 300 K, skin 0.5 Å, dt 1 fs), `DomainParallel(NVE)` at one rank in four modes,
one after another in this process: eager (`cuda_graphs=False`), eager + "auto" (the
default), compiled (`compile=True, cuda_graphs=False`) and compiled + "auto". Per mode: the
warm-up's wall seconds (--warmup steps: the compile, for the compiled modes), the wall
seconds per step over --steps steps after it (rebuilds included, their count printed) and
the graphs dynamo compiled in those steps (0: recompile-free). `--model aimnet2`: a random
AIMNet2 of aimnet2's size (float32, embedded short-range Coulomb) on an H/C/O box at the
density of water instead; `--model uma`: a random dense UMA-S-sized eSCN-MD (4 blocks, 128
channels, cutoff 6 Å, fairchem's "omat" task; `benchmarks/uma_dd1.py`) on fcc Cu.
`--profile N` then profiles N more steps per mode (torch.profiler) and prints the kernels
and ops of most GPU time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
from common import fcc_batch, mace_model, synchronize, water_like_box, write_json
from cuda_graph_step import out_of_memory_as_row
from mace_cueq import LATTICE, in_backend
from torch._dynamo.utils import counters

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import BaseModelMixin, MACEWrapper, UMAWrapper

MODES = {
    "eager": {"compile": False, "cuda_graphs": False},
    "eager+auto": {"compile": False, "cuda_graphs": "auto"},
    "compiled": {"compile": True, "cuda_graphs": False},
    "compiled+auto": {"compile": True, "cuda_graphs": "auto"},
}


def wrapper_and_system(
    model: torch.nn.Module, n_atoms: int, args: argparse.Namespace
) -> tuple[BaseModelMixin, Batch]:
    """A fresh wrapper of `model` and the system of `n_atoms` it runs on."""
    device = torch.device(args.device)
    if args.model == "aimnet2":
        from nvdd_plugins.models import AIMNet2Wrapper

        return AIMNet2Wrapper(model), water_like_box(n_atoms, device, 300.0)
    wrapper = UMAWrapper(model, task_name="omat") if args.model == "uma" else MACEWrapper(model)
    return wrapper, fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device, 300.0)


def mode_row(model: torch.nn.Module, n_atoms: int, mode: str, args: argparse.Namespace) -> dict:
    """Warm-up seconds, seconds per step and graphs compiled after the warm-up of one mode."""
    device = torch.device(args.device)
    wrapper, system = wrapper_and_system(model, n_atoms, args)
    config = DomainConfig(cutoff=wrapper.cutoff, skin=args.skin, **MODES[mode])
    dd = DomainParallel(NVE(wrapper, 1.0 if args.model == "mace" else 0.5), config)
    batch = dd.partition(system)
    synchronize(device)
    start = time.perf_counter()
    dd.run(batch, args.warmup)
    synchronize(device)
    warmup = time.perf_counter() - start
    graphs, rebuilds = counters["stats"]["unique_graphs"], dd.model.rebuilds
    start = time.perf_counter()
    dd.run(batch, args.steps)
    synchronize(device)
    step_s = (time.perf_counter() - start) / args.steps
    if args.profile:
        print_profile(lambda: dd.run(batch, args.profile), mode, device)
    return {
        "warmup_s": warmup,
        "step_s": step_s,
        "rebuilds": dd.model.rebuilds - rebuilds,
        "new_graphs": counters["stats"]["unique_graphs"] - graphs,
        "captures": dd.dynamics.graphed.captures,
    }


def print_profile(steps: Callable[[], Any], mode: str, device: torch.device) -> None:
    """Run `steps` under torch.profiler; print the 25 entries of most device time."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        steps()
        synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"## profile of {mode}", flush=True)
    print(profile.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=70))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, nargs="+", default=[10_976, 108_000])
    parser.add_argument("--model", default="mace", choices=["mace", "aimnet2", "uma"])
    parser.add_argument("--backend", default="cueq", choices=["cueq", "e3nn"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--profile", type=int, default=0, help="steps to profile per mode")
    parser.add_argument("--preset", default="small", choices=["tiny", "small", "medium"])
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if args.model == "aimnet2":
        from nvdd_plugins.models import random_aimnet2

        model = random_aimnet2(5.0, 4.6, nfeature=16, nshifts=16, hidden=256, dtype=torch.float32)
        model = model.to(args.device)
    elif args.model == "uma":
        from nvdd_plugins.models import random_uma, uma_config

        config = uma_config(cutoff=6.0, num_layers=4, channels=128, num_distance_basis=64)
        model = random_uma(config, dtype=torch.float32).to(args.device)
    else:  # converted on the GPU: mace fuses the cuEquivariance convolution only there
        mace = mace_model(args.preset, (29,), torch.float32).to(args.device)
        model = in_backend(mace, args.backend)
    rows: list[dict[str, Any]] = []
    for n_atoms in args.atoms:
        row: dict[str, Any] = {"atoms": n_atoms}
        for mode in args.modes:
            row[mode] = out_of_memory_as_row(mode_row, model, n_atoms, mode, args)
            print(n_atoms, mode, row[mode], flush=True)
        for mode in ("compiled", "compiled+auto"):
            if "step_s" in row.get(mode, {}) and "step_s" in row.get("eager+auto", {}):
                row[f"{mode}_over_eager+auto"] = row[mode]["step_s"] / row["eager+auto"]["step_s"]
        rows.append(row)
    for row in rows:
        print({k: v for k, v in row.items() if k == "atoms" or "over" in k})
    write_json(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
