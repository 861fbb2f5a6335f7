"""A NequIP or Allegro model under domain decomposition, against the same model in one process.

    make install-e3nn  # once: nequip and nequip-allegro in an overlay environment (e3nn 0.6)
    .venv-e3nn/bin/python examples/models/nequip_dd.py [--model {allegro,nequip}] [--ranks 2]

(`--model` defaults to allegro; `--cells 3` fcc cells per box edge.)

A tiny random-weight model built offline with nequip's own builders (for a trained one, wrap
the `GraphModel` nequip loads from a checkpoint or package:
`AllegroWrapper(model)` / `NequIPWrapper(model)`) runs on a rattled two-species fcc crystal,
once in one process and once split over `--ranks` simulated ranks (threads; under torchrun or
mpirun the same ReplicatedModel runs one rank per process). Prints both energies, the largest
force and stress differences, and the halo exchanges of one step: Allegro is strictly local,
so it exchanges positions and forces only, whatever its layers; NequIP adds one refresh per
convolution each way.
"""

from __future__ import annotations

import argparse

from ase.build import bulk

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import CountingCommunicator, run_simulated
from nvdd_plugins.models import (
    AllegroWrapper,
    NequIPWrapper,
    evaluate_model,
    random_allegro,
    random_nequip,
)

PROPERTIES = ("energy", "forces", "stress")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", choices=("allegro", "nequip"), default="allegro", help="default: allegro"
    )
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--cells", type=int, default=3, help="fcc cells per box edge")
    args = parser.parse_args()

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * ((args.cells,) * 3)
    atoms.numbers[::4] = 79  # Au
    atoms.rattle(0.05, seed=0)
    shifts = {"per_type_energy_shifts": {"Cu": -3.5, "Au": -3.8}}
    if args.model == "allegro":
        model = AllegroWrapper(random_allegro([29, 79], num_layers=args.layers, **shifts))
    else:
        model = NequIPWrapper(random_nequip([29, 79], num_layers=args.layers, **shifts))
    batch = Batch.from_atoms(atoms)

    single = evaluate_model(model, batch, PROPERTIES)

    def rank(comm):
        counting = CountingCommunicator(comm)
        distributed = ReplicatedModel(model, DomainConfig(model.cutoff, 0.5, counting))
        distributed(batch, PROPERTIES)  # the first step checks the spec's claims
        counting.exchanges = 0
        return distributed(batch, PROPERTIES), counting.exchanges

    split, exchanges = run_simulated(args.ranks, rank)[0]
    spec = model.distribution_spec()
    print(f"{len(atoms)} atoms, {args.model} with {args.layers} layers")
    # one cutoff of ghosts either way: NequIP's ghost rows are refreshed after each
    # convolution (spec.n_layers cutoffs would be needed without that), Allegro is local
    refresh = "strictly local" if spec.n_layers == 1 else "refreshed after each convolution"
    print(f"ghost shell: 1 cutoff ({refresh}); halo exchanges per step: {exchanges}")
    print(f"energy: 1 process {float(single['energy'][0]):.10f} eV")
    print(f"energy: {args.ranks} ranks   {float(split['energy'][0]):.10f} eV")
    force_error = float((split["forces"] - single["forces"]).abs().max())
    stress_error = float((split["stress"] - single["stress"]).abs().max())
    print(f"max |force difference|: {force_error:.2e} eV/Å")
    print(f"max |stress difference|: {stress_error:.2e} eV/Å³")


if __name__ == "__main__":
    main()
