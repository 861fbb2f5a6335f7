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

import numpy as np
import torch
from ase.build import bulk
from ase.md.velocitydistribution import thermalize_momenta
from common import write_json
from nve_drift import nve_run, side_by_side

from nvdd_plugins import Batch
from nvdd_plugins.dynamics import NVTLangevin
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
    results = side_by_side(
        lambda world_size: nve_run(model, state, world_size, args.steps, args.dt, SKIN),
        (1, 4),
        args.steps,
    )
    write_json(args.json, {"args": vars(args), **results})


if __name__ == "__main__":
    main()
