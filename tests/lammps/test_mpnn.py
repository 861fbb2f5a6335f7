"""The 3-layer SimpleMPNN through LAMMPS at 1, 2 and 4 ranks equals `evaluate_model`: periodic
triclinic box, slab with vacuum (empty sub-domains at 4 ranks) and an off-centre open cluster
(a rank that only sends ghosts), via the `lmp` binary
(handle from the input script) and via a Python driver (handle from the driver), with
`ghostneigh` off and on, after MD with re-neighbouring, and in float32."""

from __future__ import annotations

import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from tests.helpers.oracle import assert_close
from tests.helpers.systems import mpnn_model
from tests.lammps.references import at_positions, deviations, model_reference

pytestmark = pytest.mark.lammps

SYSTEM_OF = {"mpnn_bulk": "bulk_ar", "mpnn_slab": "slab_ar", "mpnn_bulk_ghostneigh": "bulk_ar"}
LMP_CASES = ["mpnn_bulk", "mpnn_slab", "mpnn_cluster"]


def _check_static(run, systems, case: str) -> None:
    atoms = systems[SYSTEM_OF.get(case, "cluster_ar")].atoms
    errs = deviations(run.snapshot(case), model_reference(mpnn_model(), atoms), atoms)
    print(f"{case} np{run.n_ranks}: {errs}")
    assert_close(errs, f"{case} np{run.n_ranks}")


def _check_after_md(run, systems) -> None:
    """Forces after MD with re-neighbouring and atom sorting equal the reference there."""
    snapshot = run.snapshot("mpnn_bulk_md")
    atoms = at_positions(systems["bulk_ar"].atoms, snapshot)
    errs = deviations(snapshot, model_reference(mpnn_model(), atoms), atoms)
    errs.pop("stress")  # the pressure now has a kinetic part
    print(f"mpnn_bulk_md np{run.n_ranks}: {errs}")
    assert_close(errs, f"mpnn_bulk_md np{run.n_ranks}")


@pytest.mark.parametrize("case", LMP_CASES)
def test_lmp_binary_matches_reference(lmp_run, systems, case: str) -> None:
    assert "halo mode: SimpleMPNN" in lmp_run.output
    _check_static(lmp_run, systems, case)


@pytest.mark.parametrize("case", sorted(SYSTEM_OF))
def test_python_driver_matches_reference(driver_run, systems, case: str) -> None:
    _check_static(driver_run, systems, case)


def test_lmp_binary_after_md(lmp_run, systems) -> None:
    _check_after_md(lmp_run, systems)


def test_python_driver_after_md(driver_run, systems) -> None:
    _check_after_md(driver_run, systems)


def test_float32_model_computes_in_float32(driver_run, systems) -> None:
    atoms = systems["bulk_ar"].atoms
    errs = deviations(
        driver_run.snapshot("mpnn32_bulk"), model_reference(mpnn_model(), atoms), atoms
    )
    print(f"mpnn32_bulk np{driver_run.n_ranks}: {errs}")
    assert 1e-12 < errs["forces"] < 1e-5
    assert errs["energy"] < 1e-6
