"""`neigh_modify exclude group all all` in halo mode: LAMMPS's neighbour lists, and so
ML-IAP's pair list, hold no pairs (its C++ side then costs O(atoms) per step), LAMMPS's ghost
shell stays the pair cutoff + skin, and the bridge lists the model's pairs itself: the
3-layer MPNN at 1, 2 and 4 ranks equals the single-process model on the periodic triclinic
bulk and the slab (LAMMPS's `balance` and `fix balance`, shift and rcb) before and after MD
with re-neighbouring, and on the open cluster. A step that needs per-atom virials (tallied
per ML-IAP pair) is refused with a clear message instead of tallying too few pairs."""

from __future__ import annotations

import pytest

from tests.lammps.jobs import missing_lammps, run_lmp

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from tests.helpers.oracle import assert_close
from tests.helpers.systems import mpnn_model
from tests.lammps.cases import model_case
from tests.lammps.lammps_io import ATTACH_LINES
from tests.lammps.references import at_positions, deviations, model_reference

pytestmark = pytest.mark.lammps

SYSTEM_OF = {
    "mpnn_bulk_exclude": "bulk_ar",
    "mpnn_cluster_exclude": "cluster_ar",
    "mpnn_slab_shift_exclude": "slab_ar",
    "mpnn_slab_rcb_exclude": "slab_ar",
}
WITH_MD = ["mpnn_bulk_exclude", "mpnn_slab_shift_exclude", "mpnn_slab_rcb_exclude"]


def test_excluded_cases_list_no_pairs(lmp_run) -> None:
    # LAMMPS's run summary; the other handle cases list pairs
    assert "Total # of neighbors = 0" in lmp_run.output


@pytest.mark.parametrize("case", sorted(SYSTEM_OF))
def test_excluded_pairs_equal_the_model(lmp_run, systems, case: str) -> None:
    atoms = systems[SYSTEM_OF[case]].atoms
    errs = deviations(lmp_run.snapshot(case), model_reference(mpnn_model(), atoms), atoms)
    print(f"{case} np{lmp_run.n_ranks}: {errs}")
    assert_close(errs, f"{case} np{lmp_run.n_ranks}")


@pytest.mark.parametrize("case", WITH_MD)
def test_excluded_pairs_after_md_equal_the_model(lmp_run, systems, case: str) -> None:
    snapshot = lmp_run.snapshot(f"{case}_md")
    atoms = at_positions(systems[SYSTEM_OF[case]].atoms, snapshot)
    errs = deviations(snapshot, model_reference(mpnn_model(), atoms), atoms)
    errs.pop("stress")  # the pressure now has a kinetic part
    print(f"{case}_md np{lmp_run.n_ranks}: {errs}")
    assert_close(errs, f"{case}_md np{lmp_run.n_ranks}")


def test_per_atom_virials_with_excluded_pairs_are_refused(workdir, systems) -> None:
    """`compute stress/atom` needs forces per ML-IAP pair: a list without them is refused on
    every rank, not tallied as zero."""
    case = model_case(
        "exclude_virial", "mpnn.pkl", systems["bulk_ar"], 2, exclude_pairs=True, atom_virials=True
    )
    (workdir / "in.exclude_virial").write_text(ATTACH_LINES + case.block())
    code, output = run_lmp(2, workdir / "in.exclude_virial", workdir, timeout=120)
    assert code != 0, output
    assert "remove `neigh_modify exclude` from the input for runs with per-atom" in output
