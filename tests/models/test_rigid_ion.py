"""RigidIonModel in one process: Ewald and PME against independent references (the rock-salt
Madelung constant, nvalchemi-toolkit-ops' Ewald), stress as the strain derivative, errors."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from ase.build import bulk
from ase.neighborlist import neighbor_list

from nvdd_plugins import Batch
from nvdd_plugins.geometry import attach_neighbor_list
from nvdd_plugins.models import PME, BornMayerHuggins, Ewald, RigidIonModel, evaluate_model
from nvdd_plugins.models import ewald as ewald_module
from nvdd_plugins.models.rigid_ion import NACL_CHARGES, TOSI_FUMI_NACL
from tests.helpers.ionic import CUTOFF, nacl_model, triclinic_nacl

# the Madelung constant of rock salt per nearest-neighbour distance (Sloane's A085469)
MADELUNG_ROCK_SALT = 1.7475645946331821906
NO_SHORT_RANGE = BornMayerHuggins(0.0, 1.0, 0.0, 0.0)


def _coulomb_only(electrostatics: Ewald | PME) -> RigidIonModel:
    pairs = {pair: NO_SHORT_RANGE for pair in TOSI_FUMI_NACL}
    return RigidIonModel(NACL_CHARGES, pairs, CUTOFF, electrostatics, coulomb_constant=1.0)


@pytest.mark.parametrize(
    ("electrostatics", "tolerance"),
    [
        (Ewald.for_accuracy(CUTOFF, 1e-12), 1e-10),
        (PME(Ewald.for_accuracy(CUTOFF, 1e-10).alpha, (32, 32, 32), order=8), 1e-6),
    ],
)
def test_rock_salt_madelung_constant(electrostatics: Ewald | PME, tolerance: float) -> None:
    atoms = bulk("NaCl", "rocksalt", a=6.0, cubic=True).repeat(2)
    out = evaluate_model(_coulomb_only(electrostatics), Batch.from_atoms(atoms), ("energy",))
    madelung = -float(out["energy"]) / (len(atoms) / 2) * 3.0  # nearest neighbours 3 Å apart
    assert abs(madelung - MADELUNG_ROCK_SALT) < tolerance


def _nvalchemiops(function: str, batch: Batch, charges: torch.Tensor, **params) -> tuple:
    """nvalchemi-toolkit-ops' `function` (ewald_summation, particle_mesh_ewald) on `batch`'s
    pairs within `CUTOFF`: per-atom energies (e²/Å) and forces (by autograd)."""
    electrostatics = pytest.importorskip("nvalchemiops.torch.interactions.electrostatics")
    order = torch.argsort(batch.edge_index[0], stable=True)
    edges = batch.edge_index[:, order]
    ptr = torch.zeros(batch.num_nodes + 1, dtype=torch.int32)
    ptr[1:] = torch.cumsum(torch.bincount(edges[0], minlength=batch.num_nodes), 0)
    positions = batch.positions.clone().requires_grad_()
    energies = getattr(electrostatics, function)(
        positions,
        charges,
        batch.cell[0],
        neighbor_list=edges.int(),
        neighbor_ptr=ptr,
        neighbor_shifts=batch.unit_shifts[order].round().int(),
        **params,
    )
    (gradient,) = torch.autograd.grad(energies.sum(), positions)
    return energies.detach(), -gradient


@pytest.mark.aimnet  # nvalchemi-toolkit-ops comes with the aimnet extra
def test_ewald_equals_nvalchemi_toolkit_ops() -> None:
    atoms = triclinic_nacl(repeat=2)
    ewald = Ewald(alpha=0.6, k_cutoff=6.5)  # exp(-k_c^2 / 4 alpha^2) ~ 1e-13: both converged
    batch = Batch.from_atoms(atoms)
    attach_neighbor_list(batch, CUTOFF)
    ours = evaluate_model(_coulomb_only(ewald), batch, ("energy", "forces"))
    params = {"alpha": ewald.alpha, "k_cutoff": ewald.k_cutoff}
    energies, forces = _nvalchemiops("ewald_summation", batch, ours["charges"], **params)
    assert float((energies - ours["energies"]).abs().max()) < 1e-12
    assert float((forces - ours["forces"]).abs().max()) < 1e-12


@pytest.mark.aimnet
@pytest.mark.parametrize(
    ("electrostatics", "tolerance"),
    [
        (Ewald(0.45, 2.0, k_set="box"), 1e-12),
        (PME(0.45, (20, 18, 22), 5, scheme="nvalchemiops"), 1e-9),
        (PME(0.45, (20, 18, 22), 4, scheme="nvalchemiops"), 1e-9),
    ],
)
def test_nvalchemiops_conventions_equal_its_sums(electrostatics: Ewald | PME, tolerance: float):
    """Unconverged parameters (Ewald truncation ~1e-4, a coarse mesh), so that only the same
    sum agrees: the box of k-vectors and nvalchemiops' PME, odd order included. (Its
    particle_mesh_ewald is 7e-10 e²/Å per atom from its own pme_reciprocal_space plus
    ewald_real_space, which ours equals to 1e-14.)"""
    atoms = triclinic_nacl(repeat=2)
    batch = Batch.from_atoms(atoms)
    attach_neighbor_list(batch, CUTOFF)
    ours = evaluate_model(_coulomb_only(electrostatics), batch, ("energy", "forces"))
    if isinstance(electrostatics, Ewald):
        function, params = "ewald_summation", {"k_cutoff": electrostatics.k_cutoff}
        standard = Ewald(electrostatics.alpha, electrostatics.k_cutoff)
    else:
        params = {"mesh_dimensions": electrostatics.mesh, "spline_order": electrostatics.order}
        function, standard = "particle_mesh_ewald", PME(electrostatics.alpha, (20, 18, 22), 4)
    charges = ours["charges"]
    energies, forces = _nvalchemiops(function, batch, charges, alpha=electrostatics.alpha, **params)
    assert float((energies - ours["energies"]).abs().max()) < tolerance
    assert float((forces - ours["forces"]).abs().max()) < tolerance
    other = evaluate_model(_coulomb_only(standard), batch, ("energy",))
    assert float((energies - other["energies"]).abs().max()) > 1e3 * tolerance


def test_pme_converges_to_ewald() -> None:
    atoms = triclinic_nacl(repeat=2)
    ewald = Ewald.for_accuracy(CUTOFF, 1e-8)
    out = {}
    for name, electrostatics in (("ewald", ewald), ("pme", PME(ewald.alpha, (48,) * 3, 8))):
        model = RigidIonModel(NACL_CHARGES, TOSI_FUMI_NACL, CUTOFF, electrostatics)
        out[name] = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "forces", "stress"))
    assert abs(float(out["pme"]["energy"] - out["ewald"]["energy"])) < 1e-6
    assert float((out["pme"]["forces"] - out["ewald"]["forces"]).abs().max()) < 1e-6
    assert float((out["pme"]["stress"] - out["ewald"]["stress"]).abs().max()) < 1e-8


@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_stress_is_the_strain_derivative_of_the_energy(method: str) -> None:
    atoms = triclinic_nacl(repeat=2)
    model = nacl_model(method, atoms)
    stress = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "stress"))["stress"][0]
    volume, h = atoms.get_volume(), 1e-5
    for a, b in ((0, 0), (2, 2), (0, 1), (1, 2)):
        strain = np.zeros((3, 3))
        strain[a, b] = strain[b, a] = h
        energies = []
        for sign in (1.0, -1.0):
            strained = atoms.copy()
            strained.set_cell(atoms.cell.array @ (np.eye(3) + sign * strain), scale_atoms=True)
            batch = Batch.from_atoms(strained)
            energies.append(float(evaluate_model(model, batch, ("energy",))["energy"]))
        derivative = (energies[0] - energies[1]) / (2 * h) / (1 if a == b else 2)
        assert abs(derivative / volume - float(stress[a, b])) < 1e-8, (a, b)


def test_bad_input_is_refused_with_a_reason() -> None:
    atoms = triclinic_nacl(repeat=2)
    model = nacl_model("ewald", atoms)
    slab = atoms.copy()
    slab.pbc = (True, True, False)
    with pytest.raises(ValueError, match="periodic along all three axes"):
        evaluate_model(model, Batch.from_atoms(slab), ("energy",))
    with pytest.raises(ValueError, match="per-atom virials and pair forces are not defined"):
        evaluate_model(model, Batch.from_atoms(atoms), ("energy", "stresses"))
    with pytest.raises(ValueError, match=r"element pair \(11, 17\)"):
        RigidIonModel(NACL_CHARGES, {(11, 11): NO_SHORT_RANGE}, CUTOFF, Ewald(0.5, 3.0))
    with pytest.raises(ValueError, match="even"):
        PME(0.5, (16, 16, 16), order=5)
    with pytest.raises(ValueError, match="scheme must be"):
        PME(0.5, (16, 16, 16), scheme="cic")
    with pytest.raises(ValueError, match="orders 2 to 6"):
        PME(0.5, (16, 16, 16), order=8, scheme="nvalchemiops")
    with pytest.raises(ValueError, match="k_set must be"):
        Ewald(0.5, 3.0, k_set="cube")
    argon = atoms.copy()
    argon.numbers[:] = 18
    with pytest.raises(ValueError, match=r"Ar \(18\)"):
        evaluate_model(model, Batch.from_atoms(argon), ("energy",))


def test_ewald_accuracy_parameters() -> None:
    ewald = Ewald.for_accuracy(8.0, 1e-6)
    assert math.erfc(ewald.alpha * 8.0) < 1e-6 < 10 * math.erfc(ewald.alpha * 8.0)
    assert math.isclose(math.exp(-(ewald.k_cutoff**2) / (4 * ewald.alpha**2)), 1e-6)


def test_shift_subtracts_each_pairs_born_energy_at_the_cutoff() -> None:
    atoms = triclinic_nacl(repeat=2)
    ewald = Ewald.for_accuracy(CUTOFF, 1e-5)
    energies = [
        float(evaluate_model(model, Batch.from_atoms(atoms), ("energy",))["energy"])
        for model in (RigidIonModel.nacl(CUTOFF, ewald), RigidIonModel.nacl(CUTOFF, ewald, True))
    ]
    i, j = neighbor_list("ij", atoms, CUTOFF)
    offsets = 0.0
    for a, b in zip(atoms.numbers[i], atoms.numbers[j], strict=True):
        t = TOSI_FUMI_NACL.get((a, b)) or TOSI_FUMI_NACL[b, a]
        offsets += t.a * math.exp((t.sigma - CUTOFF) / t.rho) - t.c / CUTOFF**6 + t.d / CUTOFF**8
    assert abs(energies[0] - energies[1] - 0.5 * offsets) < 1e-9


def test_a_net_charge_is_warned_about_once(caplog: pytest.LogCaptureFixture, monkeypatch) -> None:
    """As LAMMPS does: the energy of a charged cell includes the neutralising background's."""
    monkeypatch.setattr(ewald_module, "_warned_net_charge", [])
    atoms = triclinic_nacl(repeat=2)
    charged = atoms[1:]  # one ion fewer: net charge of +-1 e
    model = nacl_model("pme", atoms)
    with caplog.at_level(logging.WARNING, logger=ewald_module.__name__):
        evaluate_model(model, Batch.from_atoms(atoms), ("energy",))
        assert not caplog.records
        for _ in range(2):
            evaluate_model(model, Batch.from_atoms(charged), ("energy",))
    assert len(caplog.records) == 1 and "net charge of" in caplog.text, caplog.text
