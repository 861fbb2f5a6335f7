"""NVE energy conservation of molten NaCl (rigid ions, Ewald or PME) at 1 and 4 ranks.

    OMP_NUM_THREADS=1 python benchmarks/molten_nacl.py [--steps 1000] [--method pme|ewald]

Rock-salt NaCl (Tosi-Fumi, `RigidIonModel.nacl`) at the density of the melt is melted in one
process (Langevin, `--melt-steps` at `--temperature`), then the same NVE run goes under
DomainParallel on 1 and on 4 simulated ranks (the reciprocal sums all-reduced every step).
Printed: energy drift (last - first) and largest excursion per atom for each, and the
largest position and energy differences between the two runs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta
from common import write_json
from nve_drift import TotalEnergy

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import NVE, NVTLangevin
from nvdd_plugins.models import PME, Ewald, RigidIonModel

MELT_LATTICE = 6.3  # Å: rock salt at about the density of molten NaCl (1.55 g/cm³)
CUTOFF, SKIN = 6.0, 0.5  # Å


def _model(method: str, cell: np.ndarray) -> RigidIonModel:
    ewald = Ewald.for_accuracy(CUTOFF, 1e-6)
    electrostatics: Ewald | PME = ewald
    if method == "pme":
        electrostatics = PME.for_cell(ewald.alpha, torch.tensor(cell), 0.6, order=6)
    return RigidIonModel.nacl(CUTOFF, electrostatics, shift=True)


def melt(model: RigidIonModel, args: argparse.Namespace) -> Batch:
    """The crystal after `args.melt_steps` Langevin steps at `args.temperature` (one process)."""
    atoms = bulk("NaCl", "rocksalt", a=MELT_LATTICE, cubic=True).repeat(args.cells)
    thermalize_momenta(atoms, temperature_K=args.temperature, rng=np.random.default_rng(0))
    batch = Batch.from_atoms(atoms)
    dynamics = NVTLangevin(
        model, args.dt, temperature=args.temperature, friction=0.02, seed=1, skin=SKIN
    )
    for _ in range(args.melt_steps):
        dynamics.step(batch)
    return batch


def run(model: RigidIonModel, melt_state: Batch, world_size: int, steps: int, dt: float):
    """Total energies per step and final positions (by global id) at `world_size` ranks."""

    def rank(comm):
        hook = TotalEnergy()
        config = DomainConfig(cutoff=model.cutoff, skin=SKIN, mesh=comm)
        with DomainParallel(NVE(model, dt), config, steps, hooks=[hook]) as dd:
            dd.partition(melt_state.clone() if comm.rank == 0 else None)
            dd.run()
            return hook.values, dd.gather(dd.batch).positions

    return run_simulated(world_size, rank, timeout=7200)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="pme", choices=["pme", "ewald"])
    parser.add_argument("--cells", type=int, default=3, help="rock-salt cells per edge (8 ions)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--melt-steps", type=int, default=300)
    parser.add_argument("--dt", type=float, default=2.0, help="fs")
    parser.add_argument("--temperature", type=float, default=1500.0, help="K, the melt")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    cell = np.eye(3) * MELT_LATTICE * args.cells
    model = _model(args.method, cell)
    state = melt(model, args)
    n = state.num_nodes
    print(
        f"# molten NaCl NVE, {args.method} ({model.electrostatics}), {n} ions, "
        f"{args.steps} steps of {args.dt} fs, float64"
    )
    print(f"{'ranks':>5} {'drift/atom[eV]':>15} {'max |dE|/atom[eV]':>18} {'s/step':>8}")
    results = {}
    for world_size in (1, 4):
        start = time.perf_counter()
        energies, positions = run(model, state, world_size, args.steps, args.dt)
        seconds = (time.perf_counter() - start) / args.steps
        drift = (energies[-1] - energies[0]) / n
        excursion = max(abs(e - energies[0]) for e in energies) / n
        results[world_size] = {
            "drift_per_atom": drift,
            "max_excursion_per_atom": excursion,
            "seconds_per_step": seconds,
            "energies": energies,
            "positions": positions,
        }
        print(f"{world_size:5d} {drift:15.3e} {excursion:18.3e} {seconds:8.3f}", flush=True)
    difference = float((results[1]["positions"] - results[4]["positions"]).abs().max())
    pairs = zip(results[1]["energies"], results[4]["energies"], strict=True)
    energy_gap = max(abs(a - b) for a, b in pairs)
    print(
        f"1 vs 4 ranks after {args.steps} steps: max |dx| {difference:.2e} Å, "
        f"max |dE| {energy_gap:.2e} eV"
    )
    summary = {
        k: {key: v[key] for key in ("drift_per_atom", "max_excursion_per_atom", "seconds_per_step")}
        for k, v in results.items()
    }
    write_json(
        args.json,
        {
            "args": vars(args),
            "ranks": summary,
            "max_position_difference": difference,
            "max_energy_difference": energy_gap,
        },
    )


if __name__ == "__main__":
    main()
