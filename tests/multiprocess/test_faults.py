"""Fault injection under each launcher: a rank raising, a model returning NaN, a rank killed
with SIGKILL. Each must end the whole job within 30 s of the fault, non-zero, with a message
that says what happened (never a hang, never a run that carries on)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.helpers.multiprocess import TWO_RANKS, run_command

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(__file__).parent / "mpi_scripts" / "faults.py"
EXPECTED = {
    "raise": r"rank 1 failed on purpose",
    "nan": r"NonFiniteError: (step \d+: )?non-finite energies on rank \d: atoms \[",
    "kill": r"(?i)signal 9|SIGKILL",
}
LAUNCHERS = TWO_RANKS


@pytest.mark.parametrize("fault", sorted(EXPECTED))
@pytest.mark.parametrize(
    ("launcher", "path"), [("torchrun", "parallel"), ("mpirun", "parallel"), ("mpirun", "ase")]
)
def test_fault_ends_the_job(launcher: str, path: str, fault: str) -> None:
    start = time.time()
    code, output = run_command([*LAUNCHERS[launcher], str(SCRIPT), fault, path], None, 120)
    ended = time.time()
    assert code != 0, output
    assert "SURVIVED" not in output, output
    assert re.search(EXPECTED[fault], output), output
    assert "GLHF" not in output, "a peer printed its secondary error as if it had failed"
    failed = re.search(r"failing at ([0-9.]+)", output)
    since = ended - (float(failed.group(1)) if failed else start)
    assert since < 30, f"the job ended {since:.0f} s after the fault\n{output}"


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_caught_failure_ends_the_job_in_cleanup(launcher: str) -> None:
    """Every rank catches what run() raised and calls DistributedManager.cleanup(): the rank
    that failed must end the job there, not wait in cleanup's barrier while its peer waits
    in a halo exchange."""
    code, output = run_command([*LAUNCHERS[launcher], str(SCRIPT), "caught", "parallel"], None, 60)
    assert code != 0, output
    assert "rank 1 caught RuntimeError" in output, output
    assert (
        "DistributedManager.cleanup(): an earlier call on this rank ended with RuntimeError: "
        in output
    )
    assert "rank 1 failed on purpose while the other ranks may still wait" in output


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_retry_after_a_failure_on_one_rank_ends_the_job(launcher: str) -> None:
    """A retry loop (`for attempt in range(2): try: run() except: ...`) on the rank that
    failed must not enter the next run's collectives while its peer waits in the failed
    step's exchange: run() refuses to start and ends the job with the original message."""
    start = time.time()
    code, output = run_command([*LAUNCHERS[launcher], str(SCRIPT), "retry", "parallel"], None, 60)
    assert code != 0, output
    assert "rank 1 caught RuntimeError: rank 1 failed on purpose" in output, output
    assert "DomainParallel.run(): an earlier call on this rank ended with RuntimeError: " in output
    assert "attempt 1 ran to the end" not in output, output
    assert time.time() - start < 45, output


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_hook_stopping_every_rank_alike_leaves_the_ranks_in_step(launcher: str) -> None:
    """A GLOBAL hook raising alike on every rank (a script stopping its run), caught on every
    rank: the ranks are in step, so the next run() and cleanup() go ahead and the job ends
    with exit status 0."""
    code, output = run_command([*LAUNCHERS[launcher], str(SCRIPT), "stop", "parallel"], None, 60)
    assert code == 0, output
    for rank in (0, 1):
        assert f"rank {rank} caught RuntimeError: stopping at step 3" in output, output
        assert f"rank {rank} attempt 1 ran to the end" in output, output


def test_an_ase_calculation_failing_on_one_rank_ends_the_job() -> None:
    """The model raises inside the calculator on rank 1 only, which catches it and steps on
    (`try: dyn.run(1) except RuntimeError`): its peer waits in that calculation's exchange,
    which no later call can finish, so the job ends at once with the rank's message."""
    start = time.time()
    code, output = run_command([*LAUNCHERS["mpirun"], str(SCRIPT), "caught", "ase"], None, 60)
    assert code != 0, output
    assert "SURVIVED" not in output, output
    assert "rank 1 failed on purpose" in output, output
    assert "raised on this rank only" in output, output
    assert "caught RuntimeError" not in output, output
    assert time.time() - start < 45, output
