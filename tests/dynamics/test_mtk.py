"""`NPT` and `NPH` single-process: ASE's MTK trajectories (isotropic and anisotropic), the
conserved energy, and a checkpoint round trip."""

from __future__ import annotations

import io

import ase.units
import numpy as np
import pytest
from ase.md.nose_hoover_chain import MTKNPT, IsotropicMTKNPT

from nvdd_plugins import Batch
from nvdd_plugins.dynamics import NPH, NPT, MTKParameters, ThermoLogger
from tests.helpers.ase_reference import ase_lj, deviation, warm_bulk
from tests.helpers.systems import lj_model

DT, TEMPERATURE, PRESSURE, TDAMP, PDAMP = 4.0, 150.0, 0.1 * ase.units.GPa, 100.0, 400.0
MTK = MTKParameters(TDAMP, PDAMP)


@pytest.mark.parametrize(("anisotropic", "ase_class"), [(False, IsotropicMTKNPT), (True, MTKNPT)])
def test_matches_ase_mtk(anisotropic: bool, ase_class) -> None:
    atoms = warm_bulk()
    reference = ase_lj(atoms)
    fs = ase.units.fs
    ase_md = ase_class(reference, DT * fs, TEMPERATURE, PRESSURE, TDAMP * fs, PDAMP * fs)
    batch = Batch.from_atoms(atoms)
    dynamics = NPT(lj_model(), DT, TEMPERATURE, PRESSURE, MTK, anisotropic=anisotropic, skin=0.5)
    ase_md.run(200)
    dynamics.run(batch, 200)
    assert reference.get_volume() > 1.3 * atoms.get_volume(), "the cell must move"
    errors = deviation(batch, reference)
    # rounding only, amplified by 200 steps: ~6e-14 Å (isotropic), ~2e-13 Å (anisotropic)
    assert max(errors.values()) < 1e-10, errors
    assert dynamics.conserved_energy(batch) == pytest.approx(
        ase_md.get_conserved_energy(), abs=1e-10
    )


@pytest.mark.parametrize("anisotropic", [False, True])
def test_nph_conserves_enthalpy(anisotropic: bool) -> None:
    batch = Batch.from_atoms(warm_bulk())
    dynamics = NPH(lj_model(), 2.0, PRESSURE, PDAMP, TEMPERATURE, anisotropic=anisotropic)
    dynamics.prepare(batch)
    start = dynamics.conserved_energy(batch)
    dynamics.run(batch, 200)
    assert abs(float(batch.cell.det()) - float(Batch.from_atoms(warm_bulk()).cell.det())) > 10
    # bounded, O(dt²) (1.6e-6 / 4.5e-6 eV/atom isotropic / anisotropic at 2 fs, 4x less at 1 fs)
    assert abs(dynamics.conserved_energy(batch) - start) / batch.num_nodes < 1e-5


@pytest.mark.parametrize("anisotropic", [False, True])
def test_state_dict_round_trip_continues_identically(anisotropic: bool) -> None:
    def npt() -> NPT:
        return NPT(lj_model(), DT, TEMPERATURE, PRESSURE, MTK, anisotropic=anisotropic)

    straight, batch = npt(), Batch.from_atoms(warm_bulk())
    straight.run(batch, 20)
    first, resumed = npt(), Batch.from_atoms(warm_bulk())
    first.run(resumed, 10)
    second = npt()
    second.load_state_dict(first.state_dict())
    second.run(resumed, 10)
    assert float((resumed.positions - batch.positions).abs().max()) < 1e-12
    assert float((resumed.cell - batch.cell).abs().max()) < 1e-12


def test_needs_a_cell_and_stress() -> None:
    atoms = warm_bulk()
    atoms.set_cell([0.0, 0.0, 0.0])
    atoms.pbc = False
    with pytest.raises(ValueError, match="3-D cell"):
        NPT(lj_model(), DT, TEMPERATURE, PRESSURE, MTK).run(Batch.from_atoms(atoms), 1)


def test_thermo_logger_prints_volume_and_pressure() -> None:
    atoms = warm_bulk()
    stream = io.StringIO()
    dynamics = NPT(lj_model(), DT, TEMPERATURE, PRESSURE, MTK)
    dynamics.attach(ThermoLogger(frequency=5, stream=stream, cell=True))
    batch = Batch.from_atoms(atoms)
    dynamics.run(batch, 5)
    header, first, row = stream.getvalue().splitlines()  # steps 0 and 5
    assert header.split()[-2:] == ["V[A^3]", "P[GPa]"]
    assert first.split()[0] == "0" and row.split()[0] == "5"
    reference = ase_lj(atoms)
    reference.set_cell(batch.cell[0].numpy())
    reference.positions = batch.positions.numpy()
    reference.set_velocities(batch.velocities.numpy())
    pressure = -np.trace(reference.get_stress(voigt=False, include_ideal_gas=True)) / 3
    assert float(row.split()[-1]) == pytest.approx(pressure / ase.units.GPa, abs=1e-4)
    assert float(row.split()[-2]) == pytest.approx(reference.get_volume(), abs=1e-2)
