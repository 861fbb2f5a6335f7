"""Lennard-Jones heat flux: nvdd's equals LAMMPS's `compute heat/flux` (on `ke/atom`,
`pe/atom` and `stress/atom`, native `lj/cut` with `pair_modify shift yes`) on the frames of
one LAMMPS NVE trajectory of a periodic triclinic box, total and convective part, to 1e-10
relative, in one process and at two simulated ranks. For a pair potential the per-atom
virial form LAMMPS uses is exact, so both must agree."""

from __future__ import annotations

from pathlib import Path

import ase.units
import numpy as np
import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from ase import Atoms

from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import LocalCommunicator, run_simulated
from tests.helpers.systems import LJ_CUTOFF, LJ_EPSILON, LJ_SIGMA, lj_model, triclinic_bulk
from tests.lammps.jobs import run_lmp
from tests.lammps.lammps_io import lammps_frame, write_data

pytestmark = pytest.mark.lammps

FLUX_TOL = 1e-10  # relative to the largest component of the frame's flux
MVV2E = 1.0364269e-4  # LAMMPS metal units: amu (Å/ps)^2 -> eV (src/update.cpp)
# Velocities in ASE's unit whose kinetic energies are LAMMPS's (ASE's constants differ from
# MVV2E in the eighth digit): J is linear in the velocities, so nvdd's J in LAMMPS's units is
# its J in eV Å/fs divided by the same factor times ASE's fs.
TO_ASE = MVV2E**0.5
EVERY, STEPS = 5, 20
SCRIPT = f"""units metal
atom_style atomic
boundary p p p
read_data ar.data
pair_style lj/cut {LJ_CUTOFF}
pair_coeff * * {LJ_EPSILON} {LJ_SIGMA}
pair_modify shift yes
velocity all create 150.0 4928459 mom yes dist gaussian
timestep 0.004
compute ke all ke/atom
compute pe all pe/atom
compute stress all stress/atom NULL virial
compute flux all heat/flux ke pe stress
fix nve all nve
dump frames all custom {EVERY} frames.dump id x y z vx vy vz
dump_modify frames sort id format float %.17g
fix flux all ave/time {EVERY} 1 {EVERY} c_flux[*] file flux.txt format " %.17g"
run {STEPS}
"""


def _frames(path: Path, n_atoms: int) -> dict[int, np.ndarray]:
    """Step -> (n, 6) positions and velocities (Å, Å/ps) by id, from a custom dump."""
    lines, frames = path.read_text().splitlines(), {}
    for start, line in enumerate(lines):
        if line.startswith("ITEM: TIMESTEP"):
            step = int(lines[start + 1])
            rows = np.array([r.split() for r in lines[start + 9 : start + 9 + n_atoms]], float)
            frames[step] = rows[np.argsort(rows[:, 0]), 1:]
    return frames


def _lammps_fluxes(path: Path) -> dict[int, np.ndarray]:
    """Step -> (6,) total (Jx, Jy, Jz) and convective part, eV Å/ps."""
    rows = [line.split() for line in path.read_text().splitlines() if not line.startswith("#")]
    return {int(row[0]): np.array(row[1:], float) for row in rows}


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Atoms, dict, dict]:
    directory = tmp_path_factory.mktemp("heat_flux")
    atoms = lammps_frame(triclinic_bulk())
    write_data(directory / "ar.data", atoms, ("Ar",))
    (directory / "in.heat_flux").write_text(SCRIPT)
    code, output = run_lmp(1, directory / "in.heat_flux", directory)
    assert code == 0, output
    frames = _frames(directory / "frames.dump", len(atoms))
    return atoms, frames, _lammps_fluxes(directory / "flux.txt")


def _nvdd_fluxes(comm, atoms: Atoms, frames: dict) -> dict[int, np.ndarray]:
    """Step -> (6,) nvdd's total and convective flux of each frame, eV Å/ps."""
    calculator = DomainDecomposedCalculator(lj_model(), skin=0.5, comm=comm)
    found = {}
    for step, frame in frames.items():
        atoms = atoms.copy()
        atoms.positions = frame[:, :3]
        atoms.set_velocities(frame[:, 3:] * TO_ASE)
        total = calculator.get_property("heat_flux", atoms)
        convective = calculator.get_property("heat_flux_convective", atoms)
        found[step] = np.concatenate([total, convective]) / (TO_ASE * ase.units.fs)
    return found


@pytest.mark.parametrize("world_size", [1, 2])
def test_flux_equals_lammps_heat_flux(trajectory, world_size: int) -> None:
    atoms, frames, expected = trajectory
    assert sorted(frames) == sorted(expected) == list(range(0, STEPS + 1, EVERY))
    if world_size == 1:
        results = [_nvdd_fluxes(LocalCommunicator(), atoms, frames)]
    else:
        results = run_simulated(world_size, lambda comm: _nvdd_fluxes(comm, atoms, frames))
    for found in results:
        for step, flux in expected.items():
            error = float(np.abs(found[step] - flux).max() / np.abs(flux[:3]).max())
            print(f"step {step}: |J| {np.abs(flux[:3]).max():.4e} eV Å/ps, relative {error:.1e}")
            assert error < FLUX_TOL, (step, found[step], flux)
