"""Shared pieces of the benchmarks: test crystals, timing, machine description, JSON output."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp
from lj_job import fcc_crystal, maxwell_velocities

from nvdd_plugins import Batch, DistributedManager, DistributedModel, DomainConfig
from nvdd_plugins.models import BaseModelMixin, MACEArchitecture, random_mace


def fcc_batch(
    n_atoms: int,
    lattice: float,
    species: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    temperature: float | None = None,
) -> Batch:
    """A periodic fcc crystal as a one-system Batch; species cycle over the atoms; optional
    Maxwell-Boltzmann velocities (K) and masses for MD."""
    positions, cell = fcc_crystal(n_atoms, lattice, 0.05, dtype, device)
    n = positions.shape[0]
    numbers = torch.tensor(species, device=device).repeat(n // len(species) + 1)[:n]
    node = {"positions": positions, "atomic_numbers": numbers}
    if temperature is not None:
        masses = torch.full((n,), 40.0, dtype=dtype, device=device)
        velocities = torch.tensor(maxwell_velocities(n, temperature), dtype=dtype, device=device)
        node |= {"atomic_masses": masses, "velocities": velocities}
    system = {"cell": cell.unsqueeze(0), "pbc": torch.ones(1, 3, dtype=torch.bool, device=device)}
    return Batch(node, {}, system, torch.tensor([0, n], device=device))


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(
    fn: Callable[[], Any], repeats: int, device: torch.device, warmup: int = 3
) -> float:
    """Median wall time of `fn()` over `repeats` calls after `warmup` calls (TorchScript
    parts of e3nn/mace optimise themselves during the first calls)."""
    return interleaved_medians({"fn": fn}, repeats, device, warmup)["fn"]


def interleaved_medians(
    fns: dict[str, Callable[[], Any]], rounds: int, device: torch.device, warmup: int = 3
) -> dict[str, float]:
    """Median wall time of each function, timed in alternation (one call of each per round),
    so that a machine whose speed drifts during the run (a loaded host, GPU clocks) slows
    them alike; for ratios of CPU-bound steps."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            synchronize(device)
            start = time.perf_counter()
            fn()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cuda = torch.cuda.is_available()
    return {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
    }


def write_json(path: str | None, results: dict[str, Any]) -> None:
    """Write `results` plus the machine description to `path` (if given)."""
    if path:
        with open(path, "w") as handle:
            json.dump({"machine": machine(), **results}, handle, indent=2)


def mace_model(preset: str, species: tuple[int, ...], dtype: torch.dtype) -> torch.nn.Module:
    """A random-weight ScaleShiftMACE, r_max 5 Å, 2 interactions: "small" (32x0e+32x1o,
    L=3, correlation 3; the plain mace-torch anchor in docs/benchmarks.md), "medium"
    (128x0e+128x1o, L=3, correlation 3) or "tiny" (8x0e+8x1o, L=2, correlation 2)."""
    hidden, ell, correlation = {
        "tiny": ("8x0e+8x1o", 2, 2),
        "small": ("32x0e+32x1o", 3, 3),
        "medium": ("128x0e+128x1o", 3, 3),
    }[preset]
    architecture = MACEArchitecture(
        hidden_irreps=hidden,
        max_ell=ell,
        correlation=correlation,
        num_bessel=8,
        mlp_irreps="16x0e",
        avg_num_neighbors=40.0,
        interaction_scale=1.0,
    )
    return random_mace(species, r_max=5.0, architecture=architecture, dtype=dtype)


def peak_gib(device: torch.device) -> float:
    """Peak GPU memory allocated since the last reset, GiB (0 on the CPU)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0


def reset_memory(device: torch.device) -> None:
    """Free cached GPU memory and reset the peak statistics (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def dd1_step(wrapper: BaseModelMixin, batch: Batch, skin: float) -> Callable[[], Any]:
    """A closure running DistributedModel at one rank (energy + forces) on `batch`."""
    owned = batch.copy()
    owned.add_node_property("global_ids", torch.arange(owned.num_nodes, device=batch.device))
    distributed = DistributedModel(wrapper, DomainConfig(cutoff=wrapper.cutoff, skin=skin))
    distributed.setup(owned)
    return lambda: distributed(owned)["forces"]


def peak_of(step: Callable[[], Any], device: torch.device) -> float:
    """Peak memory (GiB) of one call of `step`, with what is allocated before it."""
    reset_memory(device)
    step()
    return peak_gib(device)


def compare_dd1(
    plain: Callable[[], Any], dd1: Callable[[], Any], device: torch.device, repeats: int
) -> dict[str, float]:
    """Plain vs DD@1 closures (each returning forces): peak memory of one call each, max
    |dF|, medians of `repeats` calls timed in alternation, and their ratio."""
    row = {"plain_gib": peak_of(plain, device), "dd1_gib": peak_of(dd1, device)}
    dd1_forces, plain_forces = dd1().detach(), plain().detach()
    row["max_abs_dF"] = float((dd1_forces - plain_forces.to(dd1_forces.dtype)).abs().max())
    times = interleaved_medians({"plain": plain, "dd1": dd1}, repeats, device)
    row["plain_s"], row["dd1_s"] = times["plain"], times["dd1"]
    row["dd1_over_plain"] = row["dd1_s"] / row["plain_s"]
    return row


def print_dd1_rows(rows: list[dict[str, Any]]) -> None:
    """A table of `compare_dd1` rows (with "model" and "atoms")."""
    print("model      atoms   plain ms   DD@1 ms   DD@1/plain   plain GiB   DD@1 GiB   max|dF|")
    for r in rows:
        print(
            f"{r['model']:10} {r['atoms']:6d} {1e3 * r['plain_s']:9.2f} {1e3 * r['dd1_s']:9.2f} "
            f"{r['dd1_over_plain']:11.3f} {r['plain_gib']:11.2f} {r['dd1_gib']:10.2f} "
            f"{r['max_abs_dF']:9.1e}"
        )


def gloo_rank(
    rank: int, world_size: int, port: int, measure: Callable[..., Any], args: Any, out: str
) -> None:
    """A spawned CPU rank (`torch.multiprocessing.start_processes` target): join a gloo group
    on localhost:`port` and save `measure(mesh, device, args)` as `out`/rank<rank>.pt."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    manager = DistributedManager.initialize(device="cpu")
    torch.save(measure(manager.mesh, manager.device, args), os.path.join(out, f"rank{rank}.pt"))
    DistributedManager.cleanup()


def gloo_reports(world_size: int, port: int, measure: Callable[..., Any], args: Any) -> list[Any]:
    """`measure(mesh, device, args)` of each of `world_size` spawned gloo ranks (`gloo_rank`)."""
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(
            gloo_rank,
            args=(world_size, port, measure, args, out),
            nprocs=world_size,
            start_method="spawn",
        )
        return [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(world_size)]


def water_like_box(n_atoms: int, device: torch.device, temperature: float | None = None) -> Batch:
    """H, C and O (2:1:1) on a jiggled simple cubic lattice at 0.1 atoms/Å³; optional
    Maxwell-Boltzmann velocities (K) and masses for MD."""
    side = math.ceil(n_atoms ** (1 / 3))
    spacing = 0.1 ** (-1 / 3)
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    rng = np.random.default_rng(0)
    positions = (grid[:n_atoms] + rng.normal(scale=0.1, size=(n_atoms, 3))) * spacing
    numbers = rng.choice([1, 1, 6, 8], size=n_atoms)
    cell = np.eye(3) * side * spacing
    node = {
        "positions": torch.tensor(positions, dtype=torch.float32, device=device),
        "atomic_numbers": torch.tensor(numbers, device=device),
    }
    if temperature is not None:
        velocities = maxwell_velocities(n_atoms, temperature)
        node["atomic_masses"] = torch.full((n_atoms,), 40.0, device=device)
        node["velocities"] = torch.tensor(velocities, dtype=torch.float32, device=device)
    system = {
        "cell": torch.tensor(cell, dtype=torch.float32, device=device)[None],
        "pbc": torch.ones(1, 3, dtype=torch.bool, device=device),
    }
    return Batch(node, {}, system, torch.tensor([0, n_atoms], device=device))
