"""LAMMPS keeps its own decomposition: its `balance` and `fix balance` (shift and rcb) move
sub-domain boundaries under both bridge modes (the handle's per-layer exchange, and the
fallback's redundant ghost shell), and the results stay exact: a balanced slab equals the
single-process model, before and after NVE steps during which `fix balance` moved the
boundaries (the random-weight MPNN's trajectories are chaotic, so the check is the model at
the positions reached, as for the other MPNN runs)."""

from __future__ import annotations

import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from tests.helpers.oracle import assert_close
from tests.helpers.systems import mpnn_model
from tests.lammps.references import at_positions, deviations, model_reference

pytestmark = pytest.mark.lammps

BALANCED = ("mpnn_slab_shift", "mpnn_slab_rcb", "fallback_mpnn_slab_shift")


@pytest.mark.parametrize("case", BALANCED)
def test_balanced_slab_equals_the_model(lmp_run, systems, case: str) -> None:
    atoms = systems["slab_ar"].atoms
    errs = deviations(lmp_run.snapshot(case), model_reference(mpnn_model(), atoms), atoms)
    print(f"{case} np{lmp_run.n_ranks}: {errs}")
    assert_close(errs, case)


@pytest.mark.parametrize("case", BALANCED)
def test_balanced_slab_after_md_equals_the_model(lmp_run, systems, case: str) -> None:
    snapshot = lmp_run.snapshot(f"{case}_md")
    atoms = at_positions(systems["slab_ar"].atoms, snapshot)
    errs = deviations(snapshot, model_reference(mpnn_model(), atoms), atoms)
    errs.pop("stress")  # the pressure now has a kinetic part
    print(f"{case}_md np{lmp_run.n_ranks}: {errs}")
    assert_close(errs, f"{case}_md")


def test_lammps_did_rebalance(lmp_run) -> None:
    if lmp_run.n_ranks == 1:
        pytest.skip("one rank: nothing to balance")
    # `balance` prints its imbalance before and after; the slab is centred, so a z-cut in
    # two is balanced already, in four it leaves two ranks empty
    factors = [
        line.split("=")[1].split()
        for line in lmp_run.output.splitlines()
        if "initial/final imbalance factor" in line
    ]
    assert len(factors) >= len(BALANCED)
    if lmp_run.n_ranks == 4:
        assert any(float(final) < float(initial) for initial, final in factors)


def test_rows_moved_between_runs_at_the_next_step(workdir, systems) -> None:
    """Atoms moved to other ranks between two runs, the second at the step after the first
    (`reset_timestep`, so LAMMPS counts no neighbour-list build in between): the new row
    layout is seen, and a rigid shift leaves the energy as it was, with no error."""
    from tests.lammps.cases import model_case
    from tests.lammps.jobs import run_lmp
    from tests.lammps.lammps_io import ATTACH_LINES

    case = model_case("relaid", "mpnn.pkl", systems["bulk_ar"], 2)
    moved = [
        "variable e equal pe",
        "run 0",
        'print "PE $e"',
        "displace_atoms all move 1.3 2.3 3.9",
        "variable next equal step+1",
        "reset_timestep ${next}",
        "run 0",
        'print "PE $e"',
    ]
    script = ATTACH_LINES + case.block().split("compute pe")[0] + "\n".join(moved) + "\n"
    (workdir / "in.relaid").write_text(script)
    code, output = run_lmp(2, workdir / "in.relaid", workdir, timeout=120)
    assert code == 0, output
    energies = [float(line.split()[1]) for line in output.splitlines() if line.startswith("PE ")]
    assert len(energies) == 2, output
    assert abs(energies[1] - energies[0]) < 1e-9 * abs(energies[0]), energies
