"""Process teardown under repetition: two gloo ranks whose interpreters end normally, with
and without `DistributedManager.cleanup()`, the second rank ending later; every rank of
every run must exit 0 (no "terminate called without an active exception" at exit)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers.multiprocess import REPO, run_command

pytestmark = pytest.mark.multiprocess

SCRIPT = REPO / "tests" / "multiprocess" / "mpi_scripts" / "teardown.py"


@pytest.mark.parametrize(
    "runs",
    [
        pytest.param(1, marks=pytest.mark.timeout(300)),  # the run without cleanup
        pytest.param(30, marks=[pytest.mark.slow, pytest.mark.timeout(1500)]),
    ],
    ids=["ci", "repeated"],
)
def test_ranks_end_cleanly_run_after_run(runs: int) -> None:
    code, output = run_command([sys.executable, str(SCRIPT), str(runs)], REPO, 40 * runs + 60)
    assert code == 0 and output.count(": ok") == runs, output
    assert "terminate called" not in output, output
