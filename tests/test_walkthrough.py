"""The README's first runs, typed as a new user types them, checked against what the README
says they print.

The rules, for every journey added later:

* A ```bash block marked `<!-- walkthrough: NAME -->` on the line just above its fence is a
  journey: its lines run in order in one shell (`set -e`; a `cd` holds for the lines after
  it), from a fresh directory that holds a copy of `examples/`, as in the repository's root.
* The shell is the activated venv's: `PATH` starts at the venv's `bin` (the Python running
  the tests), so `python`, `torchrun` and `lmp` are the venv's, with the `mpirun` settings
  of the README's set-up exported and the repository importable.
* Every ```python block marked `<!-- snippet: walkthrough: FILE -->` (README.md and docs/)
  is saved as FILE in that directory first: the files the journeys tell the reader to save.
* `CHECKS[NAME]` holds what the journey's output must show; a journey without checks fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.multiprocess import REPO, mpi_env
from tests.lammps.jobs import missing_lammps

pytestmark = pytest.mark.multiprocess

README = REPO / "README.md"
DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md"))]
JOURNEY = re.compile(r"<!-- walkthrough: ([\w-]+) -->")
SAVED = re.compile(r"<!-- snippet: walkthrough: (\S+) -->")
TIMEOUT_S = 240


def _blocks(document: Path, marker: re.Pattern[str], language: str) -> dict[str, str]:
    """The ```language blocks just below `marker` lines, by the marker's name."""
    lines = document.read_text().splitlines()
    found = {}
    for index, line in enumerate(lines[:-1]):
        named = marker.fullmatch(line.strip())
        if named and lines[index + 1].strip() == f"```{language}":
            end = next(j for j in range(index + 2, len(lines)) if lines[j].strip() == "```")
            found[named.group(1)] = "\n".join(lines[index + 2 : end]) + "\n"
    return found


JOURNEYS = _blocks(README, JOURNEY, "bash")
FILES = {name: code for doc in DOCUMENTS for name, code in _blocks(doc, SAVED, "python").items()}


def _rows(output: str) -> list[int]:
    """The step numbers of the ThermoLogger rows in `output`."""
    return [int(m) for m in re.findall(r"^\s+(\d+)\s+\d+\.\d+\s+-?\d+\.\d+\s", output, re.M)]


CHECKS = {
    "standalone": lambda out: out.count("Epot[eV]") == 1 and _rows(out) == [0, 20, 40, 60, 80, 100],
    # two ranks print at once, so their lines may interleave: count the energies, each rank
    # the same one, and the force shapes
    "ase": lambda out: (
        len(set(re.findall(r"-?\d+\.\d{6,}", out))) == 1
        and len(re.findall(r"-?\d+\.\d{6,}", out)) == 2
        and out.count("(108, 3)") == 2
    ),
    "lammps": lambda out: "halo mode: SimpleMPNN on 2 rank(s)" in out and "Loop time of" in out,
    "byo": lambda out: (
        "trace_and_validate: OK" in out
        and "trace_and_validate ok: True" in out
        and float(re.search(r"2 ranks vs 1 process: max \|force difference\| (\S+) eV", out)[1])
        < 1e-8
        and _rows(out) == [0, 5, 10]
    ),
}


def _environment() -> dict[str, str]:
    env = mpi_env()  # the README set-up's mpirun exports, one thread per rank
    venv = Path(sys.prefix)
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    env.pop("PYTHONHOME", None)
    return env


def test_every_journey_has_checks_and_its_files() -> None:
    assert set(JOURNEYS) == set(CHECKS), "a journey of the README without checks, or gone"
    assert {"my_md.py", "my_ase.py", "my_model.py"} <= set(FILES)
    for name, commands in JOURNEYS.items():
        for saved in re.findall(r"\b(my_\w+\.py)\b", commands):
            assert saved in FILES, f"journey {name} runs {saved}, which no document saves"


def test_the_set_up_exports_are_the_ones_the_tests_use() -> None:
    text = README.read_text().split("## Set-up")[1].split("## First runs")[0]
    exported = set(re.findall(r"^export (.+?)\s+#", text, re.M))
    variables = {pair.split("=")[0] for line in exported for pair in line.split()}
    assert variables == {
        "OMPI_MCA_rmaps_base_oversubscribe",
        "OMPI_ALLOW_RUN_AS_ROOT",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
    }
    assert all(mpi_env()[v] == "1" for v in variables)
    assert "source .venv/bin/activate" in text and "OMP_NUM_THREADS" in text


@pytest.mark.parametrize("journey", sorted(JOURNEYS))
def test_journey(journey: str, tmp_path: Path) -> None:
    if journey == "lammps" and (reason := missing_lammps()) is not None:
        pytest.skip(reason)
    examples = shutil.ignore_patterns("*.pkl", "__pycache__")
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=examples)
    for name, code in FILES.items():
        (tmp_path / name).write_text(code)
    done = subprocess.run(
        ["bash", "-e", "-c", JOURNEYS[journey]],
        cwd=tmp_path,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        start_new_session=True,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"journey {journey} exited {done.returncode}:\n{output}"
    assert CHECKS[journey](output), f"journey {journey} printed:\n{output}"
