"""Fallback mode (no handle): redundant compute on a ghost shell of 3 cutoffs reproduces the
3-layer MPNN exactly, says so on the screen, refuses a neighbour list without ghost
pairs, and reports an empty one."""

from __future__ import annotations

import pytest

from tests.lammps.jobs import missing_lammps, run_lmp

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from tests.helpers.oracle import assert_close
from tests.helpers.systems import mpnn_model
from tests.lammps.cases import model_case
from tests.lammps.references import deviations, model_reference

pytestmark = pytest.mark.lammps


def test_deep_shell_is_exact(lmp_run, systems) -> None:
    assert "fallback mode: no LAMMPS handle attached" in lmp_run.output
    atoms = systems["bulk_ar"].atoms
    snapshot = lmp_run.snapshot("fallback_mpnn_bulk")
    errs = deviations(snapshot, model_reference(mpnn_model(), atoms), atoms)
    print(f"fallback_mpnn_bulk np{lmp_run.n_ranks}: {errs}")
    assert_close(errs, f"fallback np{lmp_run.n_ranks}")


def test_missing_ghost_pairs_abort_all_ranks(workdir, systems) -> None:
    case = model_case("no_ghost_pairs", "mpnn.pkl", systems["bulk_ar"], 2, ghostneigh=0)
    (workdir / "in.no_ghost_pairs").write_text(case.block())
    code, output = run_lmp(2, workdir / "in.no_ghost_pairs", workdir, timeout=120)
    assert code != 0, output
    assert "needs the pairs around ghost atoms" in output
    assert "pair_style mliap unified <file> 1" in output


def test_an_empty_pair_list_is_reported(workdir, systems) -> None:
    """`neigh_modify exclude group all all` leaves fallback mode (which sees only ML-IAP's
    pairs) no pairs: every atom would be isolated, so the run says so."""
    case = model_case("fallback_exclude", "mpnn.pkl", systems["bulk_ar"], 1, exclude_pairs=True)
    (workdir / "in.fallback_exclude").write_text(case.block())
    code, output = run_lmp(1, workdir / "in.fallback_exclude", workdir, timeout=120)
    assert code == 0, output
    assert "ML-IAP lists no pairs around this rank's" in output
    assert "`neigh_modify exclude`, these results are wrong" in output
