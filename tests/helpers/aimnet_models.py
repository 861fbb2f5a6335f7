"""A tiny random-weight AIMNet2 for tests, and aimnet's own calculator results for it."""

from __future__ import annotations

import numpy as np
import torch
from ase import Atoms
from torch import nn

from nvdd_plugins.models.aimnet2 import AIMNet2Wrapper, random_aimnet2
from tests.helpers.oracle import ENERGY_PER_ATOM_TOL, FORCES_TOL, STRESS_TOL

SPECIES = (1, 6, 8)
DSF_CUTOFF = 7.5


def tiny_aimnet2(seed: int = 0, num_charge_channels: int = 1) -> nn.Module:
    """3 passes, 4 features x 4 shifts, aimnet's cutoffs: AEV 5 Å, short-range Coulomb
    4.6 Å."""
    return random_aimnet2(5.0, 4.6, seed=seed, num_charge_channels=num_charge_channels)


def with_species(atoms: Atoms, seed: int = 0) -> Atoms:
    """`atoms` with H, C and O drawn at random."""
    atoms = atoms.copy()
    atoms.numbers = np.random.default_rng(seed).choice(SPECIES, len(atoms))
    return atoms


def aimnet_calculator(model: nn.Module, dsf_cutoff: float = DSF_CUTOFF):
    """aimnet's `AIMNet2Calculator` for `model` with its external Coulomb set to damped
    shifted force (its differentiable torch path: deterministic=True) and its input casts,
    and `model`'s, set to float64 (as shipped they cast coordinates and cells to float32)."""
    from aimnet.calculators import AIMNet2Calculator

    calc = AIMNet2Calculator(model, device="cpu", needs_coulomb=True, deterministic=True)
    calc.set_lrcoulomb_method("dsf", cutoff=dsf_cutoff)
    f64 = {torch.float32: torch.float64}
    calc.keys_in = {k: f64.get(v, v) for k, v in calc.keys_in.items()}
    calc.keys_in_optional = {k: f64.get(v, v) for k, v in calc.keys_in_optional.items()}
    model._required_keys_dtype = [f64.get(d, d) for d in model._required_keys_dtype]
    model._optional_keys_dtype = [f64.get(d, d) for d in model._optional_keys_dtype]
    return calc


def aimnet_reference(
    calc, atoms: Atoms, charge: float = 0.0, mult: float = 1.0
) -> dict[str, torch.Tensor]:
    """Energy, forces, charges and (with a cell volume) stress from aimnet's calculator."""
    data = {
        "coord": torch.tensor(atoms.positions),
        "numbers": torch.tensor(atoms.numbers),
        "charge": charge,
        "mult": mult,
    }
    periodic = atoms.cell.rank == 3
    if periodic:
        data["cell"] = torch.tensor(atoms.cell.array)
    out = calc(data, forces=True, stress=periodic)
    ref = {
        "energy": out["energy"].detach().reshape(1),
        "forces": out["forces"].detach(),
        "charges": out["charges"].detach(),
    }
    if periodic:
        ref["stress"] = out["stress"].detach().reshape(1, 3, 3)
    return ref


def torture_aimnet2(cutoff: float, seed: int) -> AIMNet2Wrapper:
    """A tiny AIMNet2 whose Coulomb partners reach `cutoff` (damped shifted force), AEV
    cutoff 0.7 x `cutoff`; odd seeds carry a total charge of +1."""
    from aimnet.modules import LRCoulomb

    model = random_aimnet2(0.7 * cutoff, 0.6 * cutoff, seed=seed)
    coulomb = LRCoulomb(key_out="energy", method="dsf", dsf_rc=cutoff, subtract_sr=False)
    return AIMNet2Wrapper(model, coulomb.double(), charge=float(seed % 2))


def assert_aimnet_close(errs: dict[str, float], label: str = "") -> None:
    """The float64 tolerances of docs/torture.md; charges as tight as per-atom energies."""
    limits = {"energy": ENERGY_PER_ATOM_TOL, "forces": FORCES_TOL, "stress": STRESS_TOL}
    for name, err in errs.items():
        assert err < limits.get(name, ENERGY_PER_ATOM_TOL), (label, errs)
