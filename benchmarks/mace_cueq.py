"""MACE with cuEquivariance: nvdd against plain mace-torch + cuEquivariance, float32, GPU.

    python benchmarks/mace_cueq.py single --cases small:10976 small:108000 medium:32000 --e3nn
    torchrun --standalone --nproc_per_node=2 benchmarks/mace_cueq.py multi \\
        --per-gpu 108000 --strong 216000
    torchrun --standalone --nproc_per_node=2 benchmarks/mace_cueq.py multi --largest 1200000
    python benchmarks/mace_cueq.py plain --cases small:595508 small:665500

"plain" is what a mace user runs without nvdd: the cuEq model converted by mace-torch's own
`convert_e3nn_cueq` (fused convolution), fed mace's own neighbour list (`get_neighborhood`,
exact cutoff, built once) and asked for forces (`compute_force=True`); no nvdd code. "DD@1" is
`DistributedModel(MACEWrapper(same model))` on one GPU with a Verlet skin (--skin, default the
MD value 0.5 Å); both at steady state (no rebuild in the timed steps), median of --repeats
calls timed in alternation.
`single` also checks DD@1's forces against plain (max |dF|; with --float64-check both against
plain in float64, to tell rounding from error) and, with --e3nn, times plain e3nn beside.
`multi` (one process per GPU, NCCL) times, in one job: rank 0 alone on one
GPU, then all GPUs together; weak scaling = t(1 GPU, N) / t(P GPUs, P x N) (per atom: fcc
crystals only come in sizes 4 k^3), strong scaling = t(1 GPU, N) / (P x t(P GPUs, N)).
--largest runs one size on all GPUs and reports its memory; `plain` times plain cuEq alone
at --cases sizes, reporting out-of-memory instead of failing (its largest system).
`--backend e3nn` runs every mode with mace's e3nn model on both sides (no conversion).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from common import (
    dd1_step,
    fcc_batch,
    interleaved_medians,
    mace_model,
    median_seconds,
    peak_gib,
    peak_of,
    reset_memory,
    write_json,
)

from nvdd_plugins import Batch, DistributedManager, DomainConfig, DomainParallel
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import MACEWrapper
from nvdd_plugins.models.cueq import to_cuequivariance

LATTICE = 3.61  # fcc Cu, Å


def in_backend(model: torch.nn.Module, backend: str) -> torch.nn.Module:
    """`model` (mace's e3nn model) converted to cuEquivariance unless `backend` is "e3nn"."""
    return model if backend == "e3nn" else to_cuequivariance(model)


def plain_mace_step(model: torch.nn.Module, batch: Batch) -> Any:
    """A closure running plain mace-torch (energy + forces) on `batch`'s crystal."""
    from mace.data.neighborhood import get_neighborhood

    device = batch.device
    edge_index, shifts, unit_shifts, cell = get_neighborhood(
        batch.positions.double().cpu().numpy(),
        cutoff=float(model.r_max),
        pbc=(True, True, True),
        cell=batch.cell[0].double().cpu().numpy(),
    )
    dtype = batch.positions.dtype
    n = batch.num_nodes
    data = {
        "positions": batch.positions.clone(),
        "edge_index": torch.tensor(edge_index, dtype=torch.long, device=device),
        "shifts": torch.tensor(shifts, dtype=dtype, device=device),
        "unit_shifts": torch.tensor(unit_shifts, dtype=dtype, device=device),
        "cell": torch.tensor(cell, dtype=dtype, device=device),
        "node_attrs": torch.ones(n, 1, dtype=dtype, device=device),  # one species (Cu)
        "batch": torch.zeros(n, dtype=torch.long, device=device),
        "ptr": torch.tensor([0, n], device=device),
        "head": torch.zeros(1, dtype=torch.long, device=device),
    }
    return lambda: model(data, training=False, compute_force=True)["forces"]


def single_case(preset: str, n_atoms: int, args: argparse.Namespace) -> dict[str, Any]:
    """Plain cuEq, DD@1 cuEq and optionally plain e3nn on one crystal; the plain and DD@1
    steps are timed in alternation, their peak memory each alone."""
    device = torch.device("cuda")
    e3nn = mace_model(preset, (29,), torch.float32).to(device)
    cueq = in_backend(e3nn, args.backend).requires_grad_(False)
    batch = fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device)
    row: dict[str, Any] = {"preset": preset, "atoms": batch.num_nodes}
    plain = plain_mace_step(cueq, batch)
    row["plain_cueq_gib"] = peak_of(plain, device)
    plain_forces = plain().detach()
    del plain
    dd1 = dd1_step(MACEWrapper(cueq), batch, args.skin)
    row["dd1_cueq_gib"] = peak_of(dd1, device)
    forces = dd1().detach()
    times = interleaved_medians(
        {"plain": plain_mace_step(cueq, batch), "dd1": dd1}, args.repeats, device
    )
    row["plain_cueq_s"], row["dd1_cueq_s"] = times["plain"], times["dd1"]
    row["dd1_over_plain"] = row["dd1_cueq_s"] / row["plain_cueq_s"]
    row["max_abs_dF"] = float((forces - plain_forces).abs().max())
    if args.float64_check:  # both float32 results against plain cuEq in float64
        model64 = in_backend(mace_model(preset, (29,), torch.float64).to(device), args.backend)
        batch64 = fcc_batch(n_atoms, LATTICE, (29,), torch.float64, device)
        exact = plain_mace_step(model64.requires_grad_(False), batch64)().detach()
        row["plain_dF_vs_float64"] = float((plain_forces.double() - exact).abs().max())
        row["dd1_dF_vs_float64"] = float((forces.double() - exact).abs().max())
        del model64, batch64, exact
    if args.e3nn and args.backend != "e3nn":
        plain = plain_mace_step(e3nn.requires_grad_(False), batch)
        row["plain_e3nn_s"] = median_seconds(plain, args.repeats, device)
        row["cueq_speedup"] = row["plain_e3nn_s"] / row["plain_cueq_s"]
    return row


def plain_sizes(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Plain cuEq step time and peak memory per size, or "out of memory"."""
    device = torch.device("cuda")
    rows = []
    for case in args.cases:
        preset, n_atoms = case.split(":")
        model = in_backend(mace_model(preset, (29,), torch.float32).to(device), args.backend)
        batch = fcc_batch(int(n_atoms), LATTICE, (29,), torch.float32, device)
        row: dict[str, Any] = {"preset": preset, "atoms": batch.num_nodes}
        try:
            step = plain_mace_step(model.requires_grad_(False), batch)
            reset_memory(device)
            row["plain_cueq_s"] = median_seconds(step, args.repeats, device, warmup=1)
            row["plain_cueq_gib"] = peak_gib(device)
        except torch.OutOfMemoryError:
            row["plain_cueq_s"] = "out of memory"
        step = None
        print(row, flush=True)
        rows.append(row)
    return rows


def _dd_step_time(
    wrapper: MACEWrapper, n_atoms: int, mesh: Any, args: argparse.Namespace
) -> tuple[float, int, float]:
    """Median step time, total atoms and this rank's peak memory of DomainParallel."""
    chunks = args.chunk_atoms if args.chunk_atoms in (None, "auto") else int(args.chunk_atoms)
    config = DomainConfig(cutoff=wrapper.cutoff, skin=args.skin, mesh=mesh, chunk_atoms=chunks)
    dd = DomainParallel(NVE(wrapper, 1.0), config)
    device = next(wrapper.parameters()).device
    full = None
    if mesh.rank == 0:
        full = fcc_batch(n_atoms, LATTICE, (29,), torch.float32, device, 300.0)
    total = full.num_nodes if full is not None else 0
    owned = dd.partition(full)
    del full
    reset_memory(device)
    seconds = median_seconds(lambda: dd.model(owned, ("energy", "forces")), args.repeats, device)
    if args.exchange_share and mesh.world_size > 1:
        share = nccl_share(lambda: dd.model(owned, ("energy", "forces")), device)
        print(f"rank {mesh.rank}: NCCL kernels {share:.2%} of the step", flush=True)
    total = int(mesh.all_reduce(torch.tensor([total], device=device), "sum").item())
    resident = torch.cuda.memory_allocated(device) / 2**30
    print(f"rank {mesh.rank}: {total} atoms, {resident:.2f} GiB held between steps", flush=True)
    return seconds, total, peak_gib(device)


def nccl_share(step: Callable[[], Any], device: torch.device, steps: int = 5) -> float:
    """GPU time in NCCL kernels over the wall time of `steps` calls of `step` (profiled)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    nccl_us = sum(
        event.device_time_total
        for event in prof.key_averages()
        # the kernels (ncclDevKernel_*, ncclKernel_*), not the "nccl:*" host ranges above them
        if event.key.startswith("nccl") and not event.key.startswith("nccl:")
    )
    return nccl_us * 1e-6 / wall


def multi(args: argparse.Namespace) -> dict[str, Any]:
    """Weak and strong scaling (or one --largest size) over every GPU of the job."""
    from nvdd_plugins.comm import LocalCommunicator

    manager = DistributedManager.initialize()
    rank, size = manager.rank, manager.world_size
    model = mace_model(args.preset, (29,), torch.float32).to(manager.device)
    wrapper = MACEWrapper(in_backend(model, args.backend))
    out: dict[str, Any] = {"gpus": size, "preset": args.preset, "rank": rank}
    if args.largest:
        seconds, atoms, peak = _dd_step_time(wrapper, args.largest, manager.mesh, args)
        out["largest"] = {"atoms": atoms, "step_s": seconds, "peak_gib_this_rank": peak}
        print(
            f"rank {rank}: {atoms} atoms on {size} GPUs, {seconds * 1e3:.1f} ms/step, "
            f"peak {peak:.1f} GiB",
            flush=True,
        )
        return out
    one = {}
    if rank == 0:  # one GPU alone first; the other ranks wait
        local = LocalCommunicator()
        for n in (args.per_gpu, args.strong):
            one[n] = _dd_step_time(wrapper, n, local, args)
            print(f"1 GPU: {one[n][1]} atoms {one[n][0] * 1e3:.1f} ms", flush=True)
    manager.mesh.barrier()
    weak = _dd_step_time(wrapper, args.per_gpu * size, manager.mesh, args)
    strong = _dd_step_time(wrapper, args.strong, manager.mesh, args)
    if rank == 0:
        out["weak"] = {
            "atoms_1gpu": one[args.per_gpu][1],
            "t_1gpu_s": one[args.per_gpu][0],
            "atoms": weak[1],
            "t_s": weak[0],
            # per-atom time ratio: the crystal sizes differ slightly from P x N
            "efficiency": (one[args.per_gpu][0] / one[args.per_gpu][1])
            / (weak[0] * size / weak[1]),
        }
        out["strong"] = {
            "atoms": strong[1],
            "t_1gpu_s": one[args.strong][0],
            "t_s": strong[0],
            "efficiency": one[args.strong][0] / (size * strong[0]),
        }
        print(f"weak scaling {size} GPUs: {out['weak']}")
        print(f"strong scaling {size} GPUs: {out['strong']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["single", "multi", "plain"])
    parser.add_argument("--cases", nargs="+", default=["small:10976", "small:100920"])
    parser.add_argument("--preset", default="small", help="multi: the model preset")
    parser.add_argument("--per-gpu", type=int, default=100000, help="multi: weak scaling")
    parser.add_argument("--strong", type=int, default=200000, help="multi: strong scaling")
    parser.add_argument("--largest", type=int, default=0, help="multi: one size, memory")
    parser.add_argument("--skin", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--e3nn", action="store_true", help="single: time plain e3nn too")
    parser.add_argument(
        "--backend", choices=["cueq", "e3nn"], default="cueq", help="the model on both sides"
    )
    parser.add_argument(
        "--float64-check", action="store_true", help="single: both float32 forces vs float64"
    )
    parser.add_argument(
        "--exchange-share", action="store_true", help="multi: profile NCCL's share of a step"
    )
    parser.add_argument(
        "--chunk-atoms", help='multi: DomainConfig.chunk_atoms (rows per chunk or "auto")'
    )
    parser.add_argument("--verbose", action="store_true", help="log chunk planning and progress")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")
    if args.mode == "multi":
        try:
            results = multi(args)
        finally:
            DistributedManager.cleanup()
        if results["rank"] == 0:
            write_json(args.json, {"args": vars(args), **results})
        return
    if args.mode == "plain":
        write_json(args.json, {"args": vars(args), "results": plain_sizes(args)})
        return
    print(f"# MACE + cuEquivariance, float32, fcc Cu, r_max 5 Å, DD@1 skin {args.skin} Å")
    rows = []
    for case in args.cases:
        preset, n_atoms = case.split(":")
        rows.append(single_case(preset, int(n_atoms), args))
        print({k: round(v, 5) if isinstance(v, float) else v for k, v in rows[-1].items()})
    write_json(args.json, {"args": vars(args), "results": rows})


if __name__ == "__main__":
    main()
