"""NVE energy conservation at 1 and 2 ranks over a long run, side by side.

    python benchmarks/nve_drift.py [--steps 2000] [--dt 5] [--model lj|mpnn]

The same system runs single-process and under DomainParallel on 1 and 2 (simulated) ranks;
a GLOBAL hook records the total energy every step. Printed: drift (last - first) and the
largest excursion per atom for each run, and the largest position difference between runs.
"""

from __future__ import annotations

import argparse

import torch
from common import fcc_batch, write_json

from nvdd_plugins import DomainConfig, DomainParallel, HookScope
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


def _model(name: str):
    if name == "lj":
        return LennardJonesModel(0.0104, 3.4, 8.5, shift=True), 5.3, (18,)
    return SimpleMPNN(cutoff=5.0, hidden=16).double(), 5.3, (18,)


def run(world_size: int, args: argparse.Namespace) -> tuple[list[float], torch.Tensor]:
    """Energies per step and final positions (by global id) at `world_size` ranks."""
    model, lattice, species = _model(args.model)
    full = fcc_batch(
        args.atoms, lattice, species, torch.float64, torch.device("cpu"), args.temperature
    )

    def rank(comm):
        hook = TotalEnergy()
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        with DomainParallel(NVE(model, args.dt), config, args.steps, hooks=[hook]) as dd:
            dd.partition(full.clone() if comm.rank == 0 else None)
            dd.run()
            return hook.values, dd.gather(dd.batch).positions

    return run_simulated(world_size, rank, timeout=3600)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lj", choices=["lj", "mpnn"])
    parser.add_argument("--atoms", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dt", type=float, default=5.0, help="fs")
    parser.add_argument("--temperature", type=float, default=60.0, help="K, initial")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = {}
    print(f"# NVE, {args.model}, {args.atoms} atoms, {args.steps} steps of {args.dt} fs, float64")
    print(f"{'ranks':>5} {'drift/atom[eV]':>15} {'max |dE|/atom[eV]':>18}")
    for world_size in (1, 2):
        energies, positions = run(world_size, args)
        n = positions.shape[0]
        drift = (energies[-1] - energies[0]) / n
        excursion = max(abs(e - energies[0]) for e in energies) / n
        results[world_size] = {
            "drift_per_atom": drift,
            "max_excursion_per_atom": excursion,
            "energies": energies,
            "positions": positions,
        }
        print(f"{world_size:5d} {drift:15.3e} {excursion:18.3e}", flush=True)
    difference = float((results[1]["positions"] - results[2]["positions"]).abs().max())
    pairs = zip(results[1]["energies"], results[2]["energies"], strict=True)
    energy_gap = max(abs(a - b) for a, b in pairs)
    print(
        f"1 vs 2 ranks after {args.steps} steps: max |dx| {difference:.2e} Å, "
        f"max |dE| {energy_gap:.2e} eV"
    )
    write_json(
        args.json,
        {
            "args": vars(args),
            "ranks": {
                k: {
                    "drift_per_atom": v["drift_per_atom"],
                    "max_excursion_per_atom": v["max_excursion_per_atom"],
                }
                for k, v in results.items()
            },
            "max_position_difference": difference,
            "max_energy_difference": energy_gap,
        },
    )


if __name__ == "__main__":
    main()
