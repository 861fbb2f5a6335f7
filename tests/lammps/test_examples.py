"""The LAMMPS examples run as documented: `python make_models.py`, then
`mpirun -n 2 lmp -in in.<name>` for every input, and the Python driver."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers.multiprocess import REPO, run_command, run_mpi
from tests.lammps.jobs import missing_lammps, run_lmp

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)
pytest.importorskip("mace")

pytestmark = pytest.mark.lammps

EXAMPLES = REPO / "examples" / "lammps"
INPUTS = sorted(p.name for p in EXAMPLES.glob("in.*"))


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/lammps with the model files made by make_models.py."""
    directory = tmp_path_factory.mktemp("examples")
    for name in ("make_models.py", "driver.py", *INPUTS):
        shutil.copy(EXAMPLES / name, directory / name)
    code, output = run_command([sys.executable, "make_models.py"], directory, timeout=120)
    assert code == 0, output
    return directory


@pytest.mark.parametrize("script", INPUTS)
def test_input_runs_on_two_ranks(example_dir: Path, script: str) -> None:
    code, output = run_lmp(2, example_dir / script, example_dir, timeout=180)
    assert code == 0, output
    assert "halo mode" in output and "Loop time" in output, output


def test_python_driver(example_dir: Path) -> None:
    output = run_mpi(2, example_dir / "driver.py", "mpnn", timeout=180)
    assert "Loop time" in output, output
