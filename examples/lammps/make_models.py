"""Write the model files the LAMMPS examples load: lj.pkl, mpnn.pkl and mace.pkl.

    cd examples/lammps && python make_models.py

The same files come from the command line, e.g.
`python -m lammps_interface --mpnn-seed 0 --cutoff 4.5 --elements Ar -o mpnn.pkl`;
mace.pkl wraps a tiny random-weight MACE (saved as tiny_mace.pt), for trying the bridge only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from lammps_interface import MLIAPModel
from nvdd_plugins.models import LennardJonesModel, MACEWrapper, SimpleMPNN, random_mace

TINY_MACE = Path("tiny_mace.pt")


def write_tiny_mace(path: Path = TINY_MACE) -> None:
    """A random-weight ScaleShiftMACE for Ar and Cu (2 layers, r_max 4.5 Å), torch.save'd."""
    model = random_mace([18, 29], atomic_energies=[-0.5, -1.5])
    torch.save(model.double(), path)


def lj() -> MLIAPModel:
    """Argon Lennard-Jones, shifted to zero at its 8.5 Å cutoff (= lj/cut + shift yes)."""
    return MLIAPModel(LennardJonesModel(0.0104, 3.4, 8.5, shift=True), ["Ar"])


def mpnn() -> MLIAPModel:
    """A random-weight 3-layer SimpleMPNN, cutoff 4.5 Å."""
    model = SimpleMPNN(cutoff=4.5, hidden=16, n_layers=3, seed=0)
    return MLIAPModel(model, ["Ar"], dtype=torch.float64, n_layers=3)


def tiny_mace() -> MLIAPModel:
    """The tiny random MACE (written first if missing)."""
    if not TINY_MACE.exists():
        write_tiny_mace()
    return MLIAPModel(MACEWrapper.from_file(TINY_MACE), ["Ar", "Cu"], n_layers=2)


MODELS: dict[str, Callable[[], MLIAPModel]] = {"lj": lj, "mpnn": mpnn, "mace": tiny_mace}


def main() -> None:
    """Write <name>.pkl for every example model."""
    for name, build in MODELS.items():
        build().pickle(f"{name}.pkl")
        print(f"wrote {name}.pkl")


if __name__ == "__main__":
    main()
