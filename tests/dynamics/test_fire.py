"""`FIRE` and `VariableCellFIRE` single-process: ASE's FIRE (and FIRE on a
`UnitCellFilter`) path, step count and minimum."""

from __future__ import annotations

import ase.units
import numpy as np
import pytest
from ase.filters import UnitCellFilter
from ase.optimize import FIRE as AseFIRE

from nvdd_plugins import Batch
from nvdd_plugins.dynamics import FIRE, FIRESettings, VariableCellFIRE
from tests.helpers.ase_reference import ase_lj
from tests.helpers.systems import lj_model, triclinic_bulk


def test_matches_ase_fire() -> None:
    atoms = triclinic_bulk()
    reference = ase_lj(atoms)
    ase_opt = AseFIRE(reference, logfile=None)
    assert ase_opt.run(fmax=1e-3, steps=500)
    batch = Batch.from_atoms(atoms)
    optimizer = FIRE(lj_model(), fmax=1e-3, skin=0.5)
    optimizer.run(batch, 500)
    assert optimizer.is_converged(batch)
    assert optimizer.step_count == ase_opt.nsteps
    # the same path up to rounding (~4e-15 Å reached)
    assert np.abs(batch.positions.numpy() - reference.positions).max() < 1e-10
    assert abs(optimizer.dt * ase.units.fs - ase_opt.dt) < 1e-12
    assert abs(float(batch.energy[0]) - reference.get_potential_energy()) < 1e-10


def test_maxstep_caps_the_whole_displacement() -> None:
    atoms = triclinic_bulk(seed=4)
    atoms.positions[0] += [0.9, 0.0, 0.0]  # a large force: the first steps are capped
    reference = ase_lj(atoms)
    ase_opt = AseFIRE(reference, logfile=None, maxstep=0.01)
    ase_opt.run(fmax=1e-2, steps=3)
    batch = Batch.from_atoms(atoms)
    start = batch.positions.clone()
    optimizer = FIRE(lj_model(), fmax=1e-2, settings=FIRESettings(maxstep=0.01))
    optimizer.step(batch)
    assert abs(float((batch.positions - start).norm()) - 0.01) < 1e-12
    optimizer.run(batch, 2)
    assert np.abs(batch.positions.numpy() - reference.positions).max() < 1e-12


@pytest.mark.parametrize("pressure", [0.0, 0.05 * ase.units.GPa])
def test_variable_cell_matches_ase_unit_cell_filter(pressure: float) -> None:
    atoms = triclinic_bulk()
    reference = ase_lj(atoms)
    ase_opt = AseFIRE(UnitCellFilter(reference, scalar_pressure=pressure), logfile=None)
    assert ase_opt.run(fmax=1e-3, steps=500)
    batch = Batch.from_atoms(atoms)
    optimizer = VariableCellFIRE(lj_model(), fmax=1e-3, pressure=pressure, skin=0.5)
    optimizer.run(batch, 500)
    assert optimizer.is_converged(batch)
    assert optimizer.step_count == ase_opt.nsteps
    assert reference.get_volume() > 1.02 * atoms.get_volume(), "the cell must relax"
    # the same path up to rounding (~2e-14 Å reached)
    assert np.abs(batch.positions.numpy() - reference.positions).max() < 1e-10
    assert np.abs(batch.cell[0].numpy() - reference.cell.array).max() < 1e-10
