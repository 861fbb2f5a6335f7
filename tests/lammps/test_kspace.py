"""RigidIonModel against LAMMPS's own long-range Coulomb: `pair_style born/coul/long` with
`kspace_style ewald` and `pppm` (its KSPACE package) on triclinic rock-salt NaCl.

Both codes use the same splitting parameter, so the difference is each one's error, and ours
is converged far below LAMMPS's (Ewald truncated at exp(-k_c²/4 alpha²) = erfc(alpha r_c) =
1e-12; PME of order 8 on a 0.34 Å mesh, ~1e-7 eV/Å from Ewald). LAMMPS's errors, as it
states them:
* k-space: `accuracy` is the RMS force error relative to the force between two unit
  charges 1 Å apart (qqr2e e²/Å² = 14.4 eV/Å); we allow `KSPACE_MARGIN` times that per
  atom, in eV/Å for forces and in eV per atom for energies;
* real space: born/coul/long (`pair_modify table 0`) evaluates erfc with Abramowitz and
  Stegun's 7.1.26, whose absolute error is at most 1.5e-7, so each pair's Coulomb energy
  may be off by up to qqr2e |q_i q_j| 1.5e-7 / r and its force by that over r.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from nvdd_plugins import Batch
from nvdd_plugins.geometry import attach_neighbor_list
from nvdd_plugins.models import PME, Ewald, RigidIonModel, edge_vectors, evaluate_model
from nvdd_plugins.models.rigid_ion import NACL_CHARGES, TOSI_FUMI_NACL
from tests.helpers.ionic import CUTOFF, triclinic_nacl
from tests.lammps.jobs import LMP, run_lmp
from tests.lammps.lammps_io import lammps_frame, write_data

pytestmark = pytest.mark.lammps

QQR2E = 14.399645  # LAMMPS metal units' Coulomb constant, eV Å / e²
BAR = 1.602176634e6  # bar per eV/Å³
KSPACE = {"ewald": 1e-10, "pppm": 1e-7}  # kspace style -> LAMMPS accuracy (relative)
KSPACE_MARGIN = 10.0  # largest over atoms vs LAMMPS's RMS estimate
ERFC_ERROR = 1.5e-7  # Abramowitz and Stegun 7.1.26, the erfc of LAMMPS's coul/long


def _kspace_available() -> str | None:
    if not LMP.exists():
        return f"{LMP} is missing (scripts/install_lammps.sh installs it next to python)"
    help_text = subprocess.run([str(LMP), "-h"], capture_output=True, text=True).stdout
    packages = help_text.partition("Installed packages:")[2].partition("List of")[0]
    if "KSPACE" not in packages.split():
        return f"{LMP} lacks the KSPACE package: rebuild it with scripts/install_lammps.sh"
    return None


if (reason := _kspace_available()) is not None:
    pytest.skip(reason, allow_module_level=True)


def _input(style: str, accuracy: float, alpha: float) -> str:
    (na_na, na_cl, cl_cl) = (TOSI_FUMI_NACL[p] for p in ((11, 11), (11, 17), (17, 17)))
    coefficients = [
        f"pair_coeff {a} {b} {t.a!r} {t.rho!r} {t.sigma!r} {t.c!r} {t.d!r}"
        for (a, b), t in (((1, 1), na_na), ((1, 2), na_cl), ((2, 2), cl_cl))
    ]
    return "\n".join(
        [
            "units metal",
            "atom_style charge",
            "boundary p p p",
            "read_data nacl.data",
            f"pair_style born/coul/long {CUTOFF!r}",
            *coefficients,
            "pair_modify table 0",  # the erfc term computed, not tabulated
            f"kspace_style {style} {accuracy!r}",
            f"kspace_modify gewald {alpha!r}",
            "thermo_style custom step pe pxx pyy pzz pxy pxz pyz",
            "dump forces all custom 1 forces.dump id fx fy fz",
            "dump_modify forces sort id format float %.15g",
            "run 0",
            'print "ENERGY $(pe:%.15g)"',
            'print "PRESSURE $(pxx:%.15g) $(pyy:%.15g) $(pzz:%.15g) '
            '$(pxy:%.15g) $(pxz:%.15g) $(pyz:%.15g)"',
        ]
    )


def _lammps(style: str, accuracy: float, alpha: float, atoms, directory: Path) -> dict:
    write_data(directory / "nacl.data", atoms, ("Na", "Cl"), NACL_CHARGES)
    script = directory / "in.nacl"
    script.write_text(_input(style, accuracy, alpha) + "\n")
    code, output = run_lmp(1, script, directory)
    assert code == 0, output
    forces = np.loadtxt(directory / "forces.dump", skiprows=9)[:, 1:]
    energy = float(re.search(r"^ENERGY (\S+)", output, re.M).group(1))
    pressure = [float(v) for v in re.search(r"^PRESSURE (.+)$", output, re.M).group(1).split()]
    return {"energy": energy, "forces": forces, "pressure": np.array(pressure)}


def _erfc_error_bounds(atoms) -> tuple[np.ndarray, np.ndarray]:
    """Per-atom bounds of LAMMPS's real-space erfc error: energy (eV; half of each pair's)
    and force (eV/Å), summed over the pairs within the cutoff."""
    batch = Batch.from_atoms(atoms)
    attach_neighbor_list(batch, CUTOFF)
    i, j = batch.edge_index
    r = edge_vectors(batch).norm(dim=1)
    q = torch.tensor([NACL_CHARGES[int(z)] for z in atoms.numbers], dtype=torch.float64)
    pair = QQR2E * (q[i] * q[j]).abs() * ERFC_ERROR / r
    energy = torch.zeros(len(atoms), dtype=torch.float64).index_add_(0, i, 0.5 * pair)
    force = torch.zeros(len(atoms), dtype=torch.float64).index_add_(0, i, pair / r)
    return energy.numpy(), force.numpy()


def _ours(electrostatics: Ewald | PME, atoms) -> dict:
    model = RigidIonModel(NACL_CHARGES, TOSI_FUMI_NACL, CUTOFF, electrostatics, QQR2E)
    out = evaluate_model(model, Batch.from_atoms(atoms), ("energy", "forces", "stress"))
    stress = out["stress"][0].numpy()
    pressure = -BAR * stress[[0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]]
    return {"energy": float(out["energy"]), "forces": out["forces"].numpy(), "pressure": pressure}


@pytest.mark.parametrize("style", ["ewald", "pppm"])
def test_energy_forces_pressure_match_lammps(style: str, tmp_path: Path) -> None:
    atoms = lammps_frame(triclinic_nacl())
    ewald = Ewald.for_accuracy(CUTOFF, 1e-12)
    if style == "ewald":
        electrostatics: Ewald | PME = ewald
    else:
        electrostatics = PME.for_cell(ewald.alpha, torch.tensor(atoms.cell.array), 0.34, order=8)
    ours = _ours(electrostatics, atoms)
    theirs = _lammps(style, KSPACE[style], ewald.alpha, atoms, tmp_path)
    kspace = KSPACE_MARGIN * KSPACE[style] * QQR2E
    energy_bound, force_bound = _erfc_error_bounds(atoms)
    # each pair's virial error is at most its energy error bound (r times the force bound)
    pressure_tol = BAR * (2 * energy_bound.sum() + kspace * len(atoms)) / atoms.get_volume()
    energy_error = abs(ours["energy"] - theirs["energy"])
    force_errors = np.linalg.norm(ours["forces"] - theirs["forces"], axis=1)
    pressure_error = np.abs(ours["pressure"] - theirs["pressure"]).max()
    print(
        f"{style}: energy {energy_error:.2e} eV (bound {energy_bound.sum():.2e} + kspace), "
        f"forces {force_errors.max():.2e} eV/Å, pressure {pressure_error:.2e} bar"
    )
    assert energy_error < energy_bound.sum() + kspace * len(atoms)
    assert (force_errors < force_bound + kspace).all(), (force_errors - force_bound).max()
    assert pressure_error < pressure_tol
