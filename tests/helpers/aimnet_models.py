"""A tiny random-weight AIMNet2 for tests, and aimnet's own calculator results for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

import numpy as np
import torch
from ase import Atoms
from torch import nn

from nvdd_plugins.models import PME, Ewald
from nvdd_plugins.models import ewald as ewald_module
from nvdd_plugins.models.aimnet2 import AIMNet2Wrapper, random_aimnet2
from tests.helpers.oracle import ENERGY_PER_ATOM_TOL, FORCES_TOL, STRESS_TOL

SPECIES = (1, 6, 8)
DSF_CUTOFF = 7.5
LATTICE_CUTOFF = 7.0  # Å, the real-space cutoff of the Ewald and PME tests


def tiny_aimnet2(seed: int = 0, num_charge_channels: int = 1) -> nn.Module:
    """3 passes, 4 features x 4 shifts, aimnet's cutoffs: AEV 5 Å, short-range Coulomb
    4.6 Å."""
    return random_aimnet2(5.0, 4.6, seed=seed, num_charge_channels=num_charge_channels)


def with_species(atoms: Atoms, seed: int = 0) -> Atoms:
    """`atoms` with H, C and O drawn at random."""
    atoms = atoms.copy()
    atoms.numbers = np.random.default_rng(seed).choice(SPECIES, len(atoms))
    return atoms


def aimnet_calculator(model: nn.Module, dsf_cutoff: float = DSF_CUTOFF, method: str = "dsf"):
    """aimnet's `AIMNet2Calculator` for `model` with its external Coulomb set to `method`
    (damped shifted force: its differentiable torch path, deterministic=True) and its input
    casts, and `model`'s, set to float64 (as shipped they cast coordinates and cells to
    float32)."""
    from aimnet.calculators import AIMNet2Calculator

    calc = AIMNet2Calculator(model, device="cpu", needs_coulomb=True, deterministic=True)
    calc.set_lrcoulomb_method(method, cutoff=dsf_cutoff)
    f64 = {torch.float32: torch.float64}
    calc.keys_in = {k: f64.get(v, v) for k, v in calc.keys_in.items()}
    calc.keys_in_optional = {k: f64.get(v, v) for k, v in calc.keys_in_optional.items()}
    model._required_keys_dtype = [f64.get(d, d) for d in model._required_keys_dtype]
    model._optional_keys_dtype = [f64.get(d, d) for d in model._optional_keys_dtype]
    return calc


@contextmanager
def aimnet_parameters_fixed(
    electrostatics: Ewald | PME, real_space_cutoff: float
) -> Iterator[None]:
    """Inside the block aimnet's calculator sums Ewald or PME with `electrostatics` and
    `real_space_cutoff` (Å) instead of estimating them from the atom count: the estimators
    of nvalchemi-toolkit-ops it calls return these values."""
    from nvalchemiops.torch.interactions import electrostatics as package
    from nvalchemiops.torch.interactions.electrostatics import ewald, pme

    def tensor(value: float) -> torch.Tensor:
        return torch.tensor([value], dtype=torch.float64)

    def ewald_parameters(*args, **kwargs):
        return package.EwaldParameters(
            tensor(electrostatics.alpha),
            tensor(real_space_cutoff),
            tensor(electrostatics.k_cutoff),
        )

    def pme_parameters(*args, **kwargs):
        mesh = electrostatics.mesh
        spacing = torch.ones(1, 3, dtype=torch.float64)  # not read by the sums
        return package.PMEParameters(
            tensor(electrostatics.alpha), mesh, spacing, tensor(real_space_cutoff)
        )

    with ExitStack() as stack:
        for module in (package, ewald, pme):
            for name, fake in (
                ("estimate_ewald_parameters", ewald_parameters),
                ("estimate_pme_parameters", pme_parameters),
            ):
                if hasattr(module, name):
                    stack.enter_context(mock.patch.object(module, name, fake))
        yield


def lattice_electrostatics(method: str, atoms: Atoms) -> Ewald | PME:
    """Fixed Ewald ("ewald") or PME ("pme") parameters in the conventions of aimnet's sums
    (nvalchemi-toolkit-ops' box of k-vectors; its PME, order 5) at `LATTICE_CUTOFF`, for
    the cell of `atoms`: converged to about 1e-6."""
    ewald = Ewald.for_accuracy(LATTICE_CUTOFF, 1e-6)
    if method == "ewald":
        return Ewald(ewald.alpha, ewald.k_cutoff, k_set="box")
    mesh = PME.for_cell(ewald.alpha, atoms.cell.array, spacing=0.6).mesh
    return PME(ewald.alpha, mesh, 5, scheme="nvalchemiops")


def lattice_wrapper(calc, atoms: Atoms, charge: float = 0.0) -> AIMNet2Wrapper:
    """The wrapper of aimnet's calculator `calc` (method "ewald" or "pme") with the
    parameters of `lattice_electrostatics` for `atoms`."""
    electrostatics = lattice_electrostatics(calc.external_coulomb.method, atoms)
    return AIMNet2Wrapper.from_calculator(calc, charge, 1.0, electrostatics, LATTICE_CUTOFF)


def lattice_case(
    method: str, atoms: Atoms, charge: float = 0.0
) -> tuple[AIMNet2Wrapper, dict[str, torch.Tensor]]:
    """The `lattice_wrapper` of aimnet's calculator with Coulomb `method` ("ewald" or "pme")
    for a tiny model, and the calculator's results with the same parameters fixed on its
    side."""
    calc = aimnet_calculator(tiny_aimnet2(), method=method)
    wrapper = lattice_wrapper(calc, atoms, charge)
    with aimnet_parameters_fixed(wrapper.electrostatics, LATTICE_CUTOFF):
        ref = aimnet_reference(calc, atoms, charge)
    return wrapper, ref


@contextmanager
def reciprocal_sums_per_rank() -> Iterator[None]:
    """Negative control: inside the block the Ewald structure factors and the PME charge
    mesh are not summed over the ranks (each rank's reciprocal sum covers its own atoms),
    while every other global sum (AIMNet2's charge equilibration) still is."""
    with mock.patch.object(ewald_module, "summed_over_ranks", lambda partial: partial):
        yield


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


PME_AGAINST_AIMNET = {"energy": 1e-8, "forces": 1e-7, "stress": STRESS_TOL}
"""Our PME against aimnet's (nvalchemi-toolkit-ops' warp kernels) in float64: energy per
atom, forces, stress; measured 4e-11, 5e-10 and 1e-12 (their kernels accumulate in an
order of their own)."""


def assert_aimnet_close(
    errs: dict[str, float], label: str = "", limits: dict[str, float] | None = None
) -> None:
    """The float64 tolerances of docs/torture.md (or `limits`); charges as tight as per-atom
    energies."""
    limits = limits or {"energy": ENERGY_PER_ATOM_TOL, "forces": FORCES_TOL, "stress": STRESS_TOL}
    for name, err in errs.items():
        assert err < limits.get(name, ENERGY_PER_ATOM_TOL), (label, errs)
