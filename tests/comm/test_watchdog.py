"""The collective watchdog: the limit, the message, and the three silent waits of real jobs
(ASE's own collective on one rank under mpirun, the calculator called on one rank, the
user's mismatched code) each ended with a message naming the rank that did not arrive."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from nvdd_plugins.comm import collective_timeout_s, set_collective_timeout, watchdog
from nvdd_plugins.comm.stall_report import stall_message
from nvdd_plugins.comm.whereabouts import whereabouts
from tests.helpers.multiprocess import REPO, TWO_RANKS, run_command

SCRIPT = REPO / "tests" / "multiprocess" / "mpi_scripts" / "stalls.py"
LIMIT_S = 3


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVDD_COLLECTIVE_TIMEOUT_S", raising=False)
    assert collective_timeout_s() == 300.0
    monkeypatch.setenv("NVDD_COLLECTIVE_TIMEOUT_S", "2.5")
    assert collective_timeout_s() == 2.5
    for off in ("0", "off", "OFF"):
        monkeypatch.setenv("NVDD_COLLECTIVE_TIMEOUT_S", off)
        assert collective_timeout_s() is None
    monkeypatch.setenv("NVDD_COLLECTIVE_TIMEOUT_S", "five")
    with pytest.raises(ValueError, match=r"NVDD_COLLECTIVE_TIMEOUT_S='five'.*seconds"):
        collective_timeout_s()
    monkeypatch.setattr(watchdog, "_override", watchdog._override)  # restored afterwards
    set_collective_timeout(7)
    assert collective_timeout_s() == 7
    set_collective_timeout(0)
    assert collective_timeout_s() is None


def _answer(rank: int, **fields: object) -> dict[str, object]:
    base = {"rank": rank, "size": 3, "calls": 4, "in": None, "number": None, "elsewhere": None}
    return {**base, "waited": None, "past_limit": False, "step": 2, "where": "md.py:9", **fields}


def test_the_message_names_the_ranks_that_have_not_arrived() -> None:
    own = _answer(0, **{"in": "all_reduce", "number": 5, "waited": 301.0, "where": "md.py:20"})
    answers = {
        1: _answer(1, **{"in": "all_reduce", "number": 5, "waited": 300.0}),
        2: _answer(2, where="md.py:14 in build, inside ase/parallel.py:180 in MPI4PY.broadcast"),
    }
    text = stall_message(own, answers, 300.0)
    assert text.startswith("[rank0]: nvdd: rank 0 of 3 has waited 301 s in all_reduce")
    assert "after step 2" in text
    assert "Ranks not arrived: 2." in text
    assert "rank 1: waits in the same call" in text
    assert "rank 2: is in no nvdd call (it has made 4), at md.py:14" in text
    assert "comm=DummyMPI()" in text  # stuck inside ASE: the hint says what to pass
    assert "NVDD_COLLECTIVE_TIMEOUT_S = 300 s" in text
    silent = stall_message(own, {1: None, 2: answers[2]}, 300.0)
    assert "Ranks not arrived: 1, 2." in silent
    assert "rank 1: did not answer" in silent


def test_whereabouts_names_the_users_line_and_the_library_it_waits_in() -> None:
    import json

    def inner() -> str:
        return whereabouts(sys._getframe())

    here = inner()
    assert here.startswith(f"{os.path.relpath(__file__)}:") and "inner" in here
    seen = []
    json.loads("1", parse_int=lambda text: seen.append(whereabouts(sys._getframe(1))) or 1)
    assert re.search(r"test_watchdog\.py:\d+ in .*, inside json/decoder\.py:\d+", seen[0])


LAUNCHERS = {**TWO_RANKS, "mpirun": [*TWO_RANKS["mpirun"], "-m", "mpi4py"]}
CASES = {
    # rank 0 waits in ASE's broadcast (thermalize_momenta without comm=DummyMPI())
    "ase_collective": (
        "mpirun",
        r"rank 1 of 2 has waited \d+ s in broadcast_object .* DomainParallel\.partition\. "
        r"Ranks not arrived: 0\.",
        r"rank 0: is in no nvdd call .* in argon, inside ase/parallel\.py:\d+ in "
        r"MPI4PY\.broadcast",
    ),
    # rank 0 has ended its script while rank 1's calculator waits
    "one_rank_calc": (
        "mpirun",
        r"rank 1 of 2 has waited \d+ s in \w+ .*DomainDecomposedCalculator\.calculate\. "
        r"Ranks not arrived: 0\.",
        r"rank 0: did not answer",
    ),
    # rank 0 runs two steps more; rank 1 waits in cleanup. Rank 1's 1.5 s pause before
    # the first run (below the limit) must not count as a stall.
    "mismatched": (
        "torchrun",
        r"rank 0 of 2 has waited \d+ s in \w+ \(its call \d+ on this communicator, after step "
        r"4\), at .*stalls\.py:\d+ in <module>, in nvdd's DomainParallel\.run\. Ranks not "
        r"arrived: 1\.",
        r"rank 1: waits in barrier \(its call \d+ .* in nvdd's DistributedManager\.cleanup",
    ),
}


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stalled_collective_ends_the_job_with_a_message(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher, waiting, missing = CASES[case]
    monkeypatch.setenv("NVDD_COLLECTIVE_TIMEOUT_S", str(LIMIT_S))
    start = time.monotonic()
    code, output = run_command([*LAUNCHERS[launcher], str(SCRIPT), case], Path.cwd(), 90)
    assert code != 0, output
    assert "SURVIVED" not in output, output
    assert re.search(waiting, output), output
    assert re.search(missing, output), output
    assert "Ending the job: a collective waited longer than" in output
    assert output.count("Ranks not arrived") == 1, "one rank reports"
    assert time.monotonic() - start < 60, output
