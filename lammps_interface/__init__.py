"""LAMMPS bridge: nvdd models as `pair_style mliap unified` models, on LAMMPS's own domains.

    python -m lammps_interface --mpnn-seed 0 --cutoff 4.5 --elements Ar -o model.pkl

writes the file and prints the input-script lines. `MLIAPModel(model, element_types)` wraps
any nvdd model wrapper; `attach` registers the LAMMPS instance that enables the per-layer
ghost exchange (`detach` forgets it).
"""

from __future__ import annotations

from lammps_interface.handle import attach, detach
from lammps_interface.model import MLIAPModel

__all__ = ["MLIAPModel", "attach", "detach"]
