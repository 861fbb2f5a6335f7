"""DFT-D3(BJ) for the tests: PBE's parameters at short cutoffs, and simple-dftd3's own
numbers (the `dftd3` package, the reference implementation) for the same sums."""

from __future__ import annotations

import numpy as np
import torch
from ase import Atoms, units

from nvdd_plugins.models import DFTD3Model

PBE_D3BJ = {"a1": 0.4289, "a2": 4.4407, "s8": 0.7875}
"""PBE-D3(BJ) (Grimme, Ehrlich, Goerigk, J. Comput. Chem. 32, 1456 (2011))."""

D3_CUTOFF, D3_CN_CUTOFF = 8.0, 6.0  # Å: short, for cheap distributed tests


def small_d3(cutoff: float = D3_CUTOFF, cn_cutoff: float = D3_CN_CUTOFF) -> DFTD3Model:
    """PBE-D3(BJ) with the given cutoffs (Å)."""
    return DFTD3Model(**PBE_D3BJ, cutoff=cutoff, cn_cutoff=cn_cutoff)


def simple_dftd3(atoms: Atoms, cutoff: float, cn_cutoff: float) -> dict[str, torch.Tensor]:
    """simple-dftd3's PBE-D3(BJ) two-body energy (eV), forces (eV/Å) and, with a cell,
    stress (eV/Å³), at the given cutoffs (Å)."""
    from dftd3.interface import DispersionModel, RationalDampingParam

    periodic = bool(atoms.pbc.any())
    model = DispersionModel(
        atoms.numbers,
        atoms.positions / units.Bohr,
        atoms.cell.array / units.Bohr if periodic else None,
        np.asarray(atoms.pbc) if periodic else None,
    )
    model.set_realspace_cutoff(cutoff / units.Bohr, cutoff / units.Bohr, cn_cutoff / units.Bohr)
    param = RationalDampingParam(s6=1.0, s9=0.0, alp=14.0, **PBE_D3BJ)  # s9 = 0: two-body
    out = model.get_dispersion(param, grad=True)
    ref = {
        "energy": torch.tensor([float(out["energy"]) * units.Hartree], dtype=torch.float64),
        "forces": torch.tensor(-out["gradient"] * units.Hartree / units.Bohr),
    }
    if periodic:
        virial = out["virial"] * units.Hartree  # simple-dftd3's sign: dE/d(strain)
        ref["stress"] = torch.tensor(virial / atoms.get_volume()).reshape(1, 3, 3)
    return ref
