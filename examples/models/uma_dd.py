"""fairchem's UMA architecture under domain decomposition, against fairchem's own forward.

    make install-uma  # once: fairchem-core in an overlay environment
    .venv-uma/bin/python examples/models/uma_dd.py [--ranks 2] [--cells 2] [--layers 2]

A small random-weight UMA (fairchem's eSCN-MD backbone and MLP energy/force/stress head, built
offline from fairchem's own classes; for a trained one, wrap the model of a fairchem inference
checkpoint: `UMAWrapper.from_checkpoint(path, task_name="omat")`) runs on a rattled
two-species fcc crystal: once through fairchem's own forward (its graph, its autograd
force/stress head) and once split over `--ranks` simulated ranks (threads; under torchrun or
mpirun the same ReplicatedModel runs one rank per process). Prints both energies and the
largest force and stress differences.
"""

from __future__ import annotations

import argparse

import torch
from ase.build import bulk

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import UMAWrapper, random_uma, uma_config

PROPERTIES = ("energy", "forces", "stress")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--cells", type=int, default=2, help="fcc cells per box edge")
    args = parser.parse_args()

    from fairchem.core.datasets.atomic_data import AtomicData

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * ((args.cells,) * 3)
    atoms.numbers[::4] = 79  # Au
    atoms.rattle(0.05, seed=0)
    fairchem_model = random_uma(uma_config(num_layers=args.layers))
    data = AtomicData.from_ase(atoms, task_name="omat", radius=4.5, target_dtype=torch.float64)
    own = {k: v[k].detach() for k, v in fairchem_model(data)["efs"].items() if k != "embeddings"}

    model = UMAWrapper(fairchem_model, task_name="omat")
    batch = Batch.from_atoms(atoms)

    def rank(comm):
        return ReplicatedModel(model, DomainConfig(model.cutoff, 0.5, comm))(batch, PROPERTIES)

    split = run_simulated(args.ranks, rank)[0]
    print(f"{len(atoms)} atoms, UMA (eSCN-MD) with {args.layers} blocks")
    print(f"energy: fairchem  {float(own['energy'][0]):.10f} eV")
    print(f"energy: {args.ranks} ranks  {float(split['energy'][0]):.10f} eV")
    force_error = float((split["forces"] - own["forces"]).abs().max())
    stress_error = float((split["stress"].reshape(-1) - own["stress"]).abs().max())
    print(f"max |force difference|: {force_error:.2e} eV/Å")
    print(f"max |stress difference|: {stress_error:.2e} eV/Å³")


if __name__ == "__main__":
    main()
