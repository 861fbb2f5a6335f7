"""Write the model files the LAMMPS examples load: lj.pkl, mpnn.pkl and mace.pkl.

    cd examples/lammps && python make_models.py

The same files come from the command line, e.g.
`python -m lammps_interface --mpnn-seed 0 --cutoff 4.5 --elements Ar -o mpnn.pkl`;
mace.pkl wraps a tiny random-weight MACE (saved as tiny_mace.pt), for trying the bridge only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import mace  # noqa: F401  (before e3nn: mace sets the torch.load defaults e3nn needs)
import numpy as np
import torch
from e3nn import o3
from mace import modules

from lammps_interface import MLIAPModel
from nvdd_plugins.models import LennardJonesModel, MACEWrapper, SimpleMPNN

TINY_MACE = Path("tiny_mace.pt")


def write_tiny_mace(path: Path = TINY_MACE) -> None:
    """A random-weight ScaleShiftMACE for Ar and Cu (2 layers, r_max 4.5 Å), torch.save'd."""
    torch.manual_seed(0)
    model = modules.ScaleShiftMACE(
        r_max=4.5,
        num_bessel=6,
        num_polynomial_cutoff=5,
        max_ell=2,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        num_interactions=2,
        num_elements=2,
        hidden_irreps=o3.Irreps("8x0e+8x1o"),
        MLP_irreps=o3.Irreps("8x0e"),
        gate=torch.nn.functional.silu,
        atomic_energies=np.array([-0.5, -1.5]),
        avg_num_neighbors=12.0,
        atomic_numbers=[18, 29],
        correlation=2,
        atomic_inter_scale=0.1,
        atomic_inter_shift=0.0,
    )
    torch.save(model.double(), path)


def lj() -> MLIAPModel:
    """Argon Lennard-Jones, shifted to zero at its 8.5 Å cutoff (= lj/cut + shift yes)."""
    return MLIAPModel(LennardJonesModel(0.0104, 3.4, 8.5, shift=True), ["Ar"], n_layers=1)


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
