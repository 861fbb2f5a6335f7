"""NVE energy conservation at 1 and 2 ranks over a long run, side by side.

    python benchmarks/nve_drift.py [--steps 2000] [--dt 5] [--model lj|mpnn]

The same system runs single-process and under DomainParallel on 1 and 2 (simulated) ranks;
a GLOBAL hook records the total energy every step. Printed: drift (last - first) and the
largest excursion per atom for each run, and the largest position difference between runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from common import fcc_batch, write_json

from nvdd_plugins import Batch, DomainConfig, DomainParallel, HookScope
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import NVE, DynamicsStage
from nvdd_plugins.models import LennardJonesModel, SimpleMPNN


class TotalEnergy:
    """GLOBAL hook: total energy (eV) of the gathered system after every step."""

    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.GLOBAL
    frequency = 1

    def __init__(self) -> None:
        self.values: list[float] = []

    def __call__(self, ctx, stage) -> None:
        batch = ctx.batch
        kinetic = 0.5 * (batch.atomic_masses * (batch.velocities**2).sum(-1)).sum()
        self.values.append(float(batch.energy.sum() + kinetic))


def conservation(energies: list[float], n_atoms: int) -> dict[str, float]:
    """Drift (last - first) and largest excursion from the first step, per atom (eV)."""
    return {
        "drift_per_atom": (energies[-1] - energies[0]) / n_atoms,
        "max_excursion_per_atom": max(abs(e - energies[0]) for e in energies) / n_atoms,
    }


def side_by_side(
    run_at: Callable[[int], tuple[list[float], torch.Tensor]], ranks: tuple[int, int], steps: int
) -> dict:
    """`run_at(world_size)` (energies per step, final positions) at both rank counts:
    prints and returns each run's conservation and seconds per step, and the largest
    position (Å) and per-step energy (eV) differences between the two."""
    runs, summary = {}, {}
    print(f"{'ranks':>5} {'drift/atom[eV]':>15} {'max |dE|/atom[eV]':>18} {'s/step':>8}")
    for world_size in ranks:
        start = time.perf_counter()
        runs[world_size] = energies, positions = run_at(world_size)
        seconds = (time.perf_counter() - start) / steps
        summary[world_size] = conservation(energies, positions.shape[0])
        summary[world_size]["seconds_per_step"] = seconds
        drift, excursion, _ = summary[world_size].values()
        print(f"{world_size:5d} {drift:15.3e} {excursion:18.3e} {seconds:8.3f}", flush=True)
    (e1, x1), (e2, x2) = runs.values()
    difference = float((x1 - x2).abs().max())
    energy_gap = max(abs(a - b) for a, b in zip(e1, e2, strict=True))
    print(
        f"{ranks[0]} vs {ranks[1]} ranks after {steps} steps: max |dx| {difference:.2e} Å, "
        f"max |dE| {energy_gap:.2e} eV"
    )
    return {
        "ranks": summary,
        "max_position_difference": difference,
        "max_energy_difference": energy_gap,
    }


def _model(name: str):
    if name == "lj":
        return LennardJonesModel(0.0104, 3.4, 8.5, shift=True), 5.3, (18,)
    return SimpleMPNN(cutoff=5.0, hidden=16).double(), 5.3, (18,)


def nve_run(
    model, full: Batch, world_size: int, steps: int, dt: float, skin: float = 0.5
) -> tuple[list[float], torch.Tensor]:
    """`steps` NVE steps of `dt` fs from `full` under DomainParallel on `world_size`
    simulated ranks: total energies per step and final positions (by global id)."""

    def rank(comm):
        hook = TotalEnergy()
        config = DomainConfig(cutoff=model.cutoff, skin=skin, mesh=comm)
        with DomainParallel(NVE(model, dt), config, steps, hooks=[hook]) as dd:
            dd.partition(full.clone() if comm.rank == 0 else None)
            dd.run()
            return hook.values, dd.gather(dd.batch).positions

    return run_simulated(world_size, rank, timeout=7200)[0]


def run(world_size: int, args: argparse.Namespace) -> tuple[list[float], torch.Tensor]:
    """Energies per step and final positions (by global id) at `world_size` ranks."""
    model, lattice, species = _model(args.model)
    full = fcc_batch(
        args.atoms, lattice, species, torch.float64, torch.device("cpu"), args.temperature
    )
    return nve_run(model, full, world_size, args.steps, args.dt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lj", choices=["lj", "mpnn"])
    parser.add_argument("--atoms", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dt", type=float, default=5.0, help="fs")
    parser.add_argument("--temperature", type=float, default=60.0, help="K, initial")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    print(f"# NVE, {args.model}, {args.atoms} atoms, {args.steps} steps of {args.dt} fs, float64")
    results = side_by_side(lambda world_size: run(world_size, args), (1, 2), args.steps)
    write_json(args.json, {"args": vars(args), **results})


if __name__ == "__main__":
    main()
