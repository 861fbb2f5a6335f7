"""Lennard-Jones through the bridge equals LAMMPS's native `lj/cut` + `pair_modify shift yes`
at 1, 2 and 4 ranks: energy, per-atom energies and forces by id, pressure tensor, and a
100-step NVE trajectory; and the one-layer fallback equals the model's own evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from tests.helpers.oracle import ENERGY_PER_ATOM_TOL, FORCES_TOL, STRESS_TOL, assert_close
from tests.helpers.systems import lj_model
from tests.lammps.lammps_io import Snapshot
from tests.lammps.references import deviations, model_reference

pytestmark = pytest.mark.lammps

TRAJECTORY_TOL = 1e-8  # Å after 100 NVE steps


def _differences(a: Snapshot, b: Snapshot) -> dict[str, float]:
    n = len(a.energies)
    return {
        "energy": abs(a.energy - b.energy) / n,
        "energies": float(np.abs(a.energies - b.energies).max()),
        "forces": float(np.abs(a.forces - b.forces).max()),
        "stress": float(np.abs(a.stress() - b.stress()).max()),
    }


@pytest.mark.parametrize("case", ["lj_bridge", "lj_bridge_ghostneigh"])
def test_static_equals_native(driver_run, case: str) -> None:
    errs = _differences(driver_run.snapshot(case), driver_run.snapshot("lj_native"))
    print(f"{case} np{driver_run.n_ranks}: {errs}")
    assert_close(errs, case)


def test_nve_trajectory_equals_native(driver_run) -> None:
    native, bridge = driver_run.snapshot("lj_native_md"), driver_run.snapshot("lj_bridge_md")
    drift = float(np.abs(native.unwrapped - bridge.unwrapped).max())
    forces = float(np.abs(native.forces - bridge.forces).max())
    energy = abs(native.energy - bridge.energy) / len(native.energies)
    print(
        f"lj NVE np{driver_run.n_ranks}: positions {drift:.1e} forces {forces:.1e} E {energy:.1e}"
    )
    assert drift < TRAJECTORY_TOL
    assert forces < FORCES_TOL
    assert energy < ENERGY_PER_ATOM_TOL


def test_fallback_equals_model(lmp_run, systems) -> None:
    atoms = systems["bulk_ar"].atoms
    errs = deviations(
        lmp_run.snapshot("fallback_lj_bulk"), model_reference(lj_model(), atoms), atoms
    )
    print(f"fallback_lj_bulk np{lmp_run.n_ranks}: {errs}")
    assert_close(errs, "fallback lj")
    assert errs["stress"] < STRESS_TOL


def test_open_cluster_with_a_send_only_rank(lmp_run, systems) -> None:
    atoms = systems["cluster_ar"].atoms
    errs = deviations(lmp_run.snapshot("lj_cluster"), model_reference(lj_model(), atoms), atoms)
    print(f"lj_cluster np{lmp_run.n_ranks}: {errs}")
    assert_close(errs, "lj open cluster")
