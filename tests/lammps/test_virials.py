"""LAMMPS's per-atom virials (`compute stress/atom NULL virial`) through the bridge at 1, 2 and
4 ranks: SimpleMPNN and tiny MACE equal the single-process per-atom values and sum to the
global virial (pressure x volume); energy, forces and pressure stay exact on that step (the
forces then go in per pair); the LJ bridge equals LAMMPS's own `lj/cut`; with ghostneigh, in
fallback mode and for an open cluster."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from nvdd_plugins.models import MACEWrapper
from tests.helpers.mace_models import tiny_mace
from tests.helpers.oracle import assert_close
from tests.helpers.systems import mpnn_model
from tests.lammps.references import (
    atom_virial_reference,
    deviations,
    model_reference,
    virial_deviations,
)

pytestmark = pytest.mark.lammps

VIRIAL_TOL = 1e-10  # eV

DRIVER_CASES = {
    "mpnn_bulk_virial": ("mpnn", "bulk_ar"),
    "mpnn_slab_virial": ("mpnn", "slab_ar"),
    "mpnn_bulk_ghostneigh_virial": ("mpnn", "bulk_ar"),
    "mace_bulk_virial": ("mace", "bulk_mix"),
    "mace_slab_virial": ("mace", "slab_mix"),
}
LMP_CASES = {
    "mpnn_cluster_virial": ("mpnn", "cluster_ar"),
    "fallback_mpnn_bulk_virial": ("mpnn", "bulk_ar"),
}


def _model(name: str):
    return mpnn_model() if name == "mpnn" else MACEWrapper(tiny_mace())


def _check(run, systems, case: str, model_name: str, system: str) -> None:
    atoms = systems[system].atoms
    model = _model(model_name)
    snapshot = run.snapshot(case)
    errs = deviations(snapshot, model_reference(model, atoms), atoms)
    virials = virial_deviations(snapshot, atom_virial_reference(model, atoms))
    print(f"{case} np{run.n_ranks}: {errs} {virials}")
    assert_close(errs, f"{case} np{run.n_ranks}")
    assert virials["per_atom"] < VIRIAL_TOL and virials["sum"] < VIRIAL_TOL, (case, virials)


@pytest.mark.parametrize("case", sorted(DRIVER_CASES))
def test_per_atom_virials_match_and_sum_to_the_virial(driver_run, systems, case: str) -> None:
    _check(driver_run, systems, case, *DRIVER_CASES[case])


@pytest.mark.parametrize("case", sorted(LMP_CASES))
def test_lmp_binary_per_atom_virials(lmp_run, systems, case: str) -> None:
    _check(lmp_run, systems, case, *LMP_CASES[case])


def test_lj_bridge_equals_lj_cut(driver_run) -> None:
    native = driver_run.snapshot("lj_native_virial")
    bridge = driver_run.snapshot("lj_bridge_virial")
    per_atom = float(np.abs(bridge.atom_virials - native.atom_virials).max())
    forces = float(np.abs(bridge.forces - native.forces).max())
    summed = virial_deviations(bridge, native.atom_virials)["sum"]
    print(f"lj np{driver_run.n_ranks}: per-atom {per_atom:.2e} eV, sum {summed:.2e} eV")
    assert per_atom < VIRIAL_TOL and summed < VIRIAL_TOL and forces < 1e-10


def test_per_atom_virials_are_not_trivial(driver_run, systems) -> None:
    """Negative control: the per-atom comparison can fail (the values differ from atom to
    atom far beyond the tolerance, and not only by a uniform share of the total)."""
    virials = driver_run.snapshot("mpnn_bulk_virial").atom_virials
    uniform = np.broadcast_to(virials.mean(axis=0), virials.shape)
    assert np.abs(virials - uniform).max() > 1e-4
