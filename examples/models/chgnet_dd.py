"""Pretrained CHGNet under domain decomposition on MgO, against the same model in one process.

    make install-chgnet  # once: chgnet in an overlay environment
    .venv-chgnet/bin/python examples/models/chgnet_dd.py [--ranks 2] [--length 9]

CHGNet 0.3.0 (chgnet 0.4.2's wheel, `CHGNetWrapper.from_pretrained("0.3.0")`: a 6 Å atom
graph and a 3 Å bond graph with angles, 4 interaction blocks) on a rattled rocksalt MgO rod
in vacuum, in float64, once in one process and once split over `--ranks` simulated ranks
(threads; under torchrun or mpirun the same runs one rank per process). The bond graph is
exact under DD with a 12 Å ghost shell and the 3 Å pairs between ghosts (docs/chgnet.md).
Prints both energies and the largest force and magnetic-moment differences.
"""

from __future__ import annotations

import argparse
import itertools
import warnings

# chgnet's own notes when it builds a graph from a tensor that needs gradients
warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad=True")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ase import Atoms  # noqa: E402

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel  # noqa: E402
from nvdd_plugins.comm import run_simulated  # noqa: E402
from nvdd_plugins.models import CHGNetWrapper, evaluate_model  # noqa: E402

PROPERTIES = ("energy", "forces", "magmoms")


def rod(length: int) -> Atoms:
    """A `length` x 3 x 3 block of rocksalt MgO sites (a = 4.21 Å), rattled by 0.05 Å."""
    sites = np.array(list(itertools.product(range(length), range(3), range(3))))
    symbols = ["Mg" if s.sum() % 2 == 0 else "O" for s in sites]
    atoms = Atoms(symbols, positions=sites * 4.21 / 2)
    atoms.positions += np.random.default_rng(0).normal(scale=0.05, size=atoms.positions.shape)
    return atoms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--length", type=int, default=9, help="rock-salt sites along the rod")
    args = parser.parse_args()

    atoms = rod(args.length)
    model = CHGNetWrapper.from_pretrained("0.3.0", dtype=torch.float64)
    batch = Batch.from_atoms(atoms)
    single = evaluate_model(model, batch, PROPERTIES)

    def rank(comm):
        config = DomainConfig(cutoff=model.cutoff, skin=0.5, mesh=comm, grid=(comm.size, 1, 1))
        return ReplicatedModel(model, config)(batch, PROPERTIES)

    split = run_simulated(args.ranks, rank)[0]
    ghosts = model.model_config.neighbor_config.ghost_layers * model.cutoff
    print(f"CHGNet 0.3.0 on {len(atoms)} MgO ions, ghost shell {ghosts:g} Å + skin")
    print(f"energy: 1 process {float(single['energy'][0]):.10f} eV")
    print(f"energy: {args.ranks} ranks   {float(split['energy'][0]):.10f} eV")
    force_error = float((split["forces"] - single["forces"]).abs().max())
    magmom_error = float((split["magmoms"] - single["magmoms"]).abs().max())
    print(f"max |force difference|: {force_error:.2e} eV/Å")
    print(f"max |magnetic moment difference|: {magmom_error:.2e} μB")


if __name__ == "__main__":
    main()
