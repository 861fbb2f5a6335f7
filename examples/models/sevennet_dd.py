"""A SevenNet model under domain decomposition, against the same model in one process.

    make install-e3nn  # once: sevenn in an overlay environment (it needs e3nn >= 0.5)
    .venv-e3nn/bin/python examples/models/sevennet_dd.py [--ranks 2] [--cells 3]

A tiny random-weight sevenn model (built offline from a config; for a trained one, wrap a
checkpoint's model: `SevenNetWrapper(sevenn.util.load_checkpoint(path).build_model())`)
runs on a rattled two-species fcc crystal, once in one process and once split over
`--ranks` simulated ranks (threads; under torchrun or mpirun the same ReplicatedModel runs
one rank per process). Prints both energies and the largest force and stress differences.
"""

from __future__ import annotations

import argparse

import torch
from ase.build import bulk

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import SevenNetWrapper, evaluate_model, random_sevennet

PROPERTIES = ("energy", "forces", "stress")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--cells", type=int, default=3, help="fcc cells per box edge")
    args = parser.parse_args()

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * ((args.cells,) * 3)
    atoms.numbers[::4] = 79  # Au
    atoms.rattle(0.05, seed=0)
    model = SevenNetWrapper(random_sevennet([29, 79], shift=[-3.5, -3.8], dtype=torch.float64))
    batch = Batch.from_atoms(atoms)

    single = evaluate_model(model, batch, PROPERTIES)

    def rank(comm):
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm)
        return ReplicatedModel(model, config)(batch, PROPERTIES)

    split = run_simulated(args.ranks, rank)[0]
    print(f"{len(atoms)} atoms, {model.distribution_spec().n_layers} interaction layers")
    print(f"energy: 1 process {float(single['energy'][0]):.10f} eV")
    print(f"energy: {args.ranks} ranks   {float(split['energy'][0]):.10f} eV")
    force_error = float((split["forces"] - single["forces"]).abs().max())
    stress_error = float((split["stress"] - single["stress"]).abs().max())
    print(f"max |force difference|: {force_error:.2e} eV/Å")
    print(f"max |stress difference|: {stress_error:.2e} eV/Å³")


if __name__ == "__main__":
    main()
