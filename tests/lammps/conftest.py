"""Shared LAMMPS runs: systems and models are written once, and each rank count launches the
`lmp` binary once and the Python driver once over many cases; tests compare the outputs.

Test modules skip themselves when LAMMPS is missing; the fixtures need mace as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.multiprocess import run_mpi
from tests.lammps.cases import (
    LammpsSystem,
    driver_cases,
    lmp_cases,
    make_systems,
    model_case,
    write_models,
)
from tests.lammps.jobs import run_lmp
from tests.lammps.lammps_io import ATTACH_LINES, Snapshot, read_snapshot, write_data

RANKS = [1, 2, 4]
MODEL_RANKS = [1, 2, pytest.param(4, marks=pytest.mark.slow)]
"""Rank counts of the model-specific LAMMPS runs (NequIP/Allegro, UMA): 4 ranks only in
test-all, since the LAMMPS bridge at 4 ranks runs in CI through `lmp_run` and `driver_run`
and each model at 4 real ranks through its gloo test."""
DRIVER = Path(__file__).parent / "scripts" / "driver.py"


@dataclass(frozen=True)
class Run:
    """One launch: where it wrote, its output and its rank count."""

    directory: Path
    output: str
    n_ranks: int

    def snapshot(self, prefix: str) -> Snapshot:
        """The outputs of one case (see `Case`)."""
        return read_snapshot(self.directory, prefix)


@pytest.fixture(scope="session")
def systems() -> dict[str, LammpsSystem]:
    """The test systems in LAMMPS's frame (see `make_systems`)."""
    pytest.importorskip("mace")
    return make_systems()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory, systems: dict[str, LammpsSystem]) -> Path:
    """A directory with the data files and model files."""
    directory = tmp_path_factory.mktemp("lammps")
    for system in systems.values():
        write_data(directory / system.data, system.atoms, system.elements)
    write_models(directory)
    return directory


def _run_dir(workdir: Path, label: str) -> Path:
    directory = workdir / label
    directory.mkdir()
    for item in workdir.iterdir():
        if item.is_file():
            (directory / item.name).symlink_to(item)
    return directory


@pytest.fixture(scope="session", params=RANKS, ids=lambda n: f"np{n}")
def lmp_run(request: pytest.FixtureRequest, workdir: Path, systems: dict[str, LammpsSystem]) -> Run:
    """The `lmp` binary over `lmp_cases` (the input script attaches the handle)."""
    n_ranks = request.param
    directory = _run_dir(workdir, f"lmp_np{n_ranks}")
    fallback, handle = lmp_cases(systems, n_ranks)
    script = "".join(c.block() for c in fallback) + ATTACH_LINES
    script += "".join(c.block() for c in handle)
    (directory / "in.cases").write_text(script)
    code, output = run_lmp(n_ranks, directory / "in.cases", directory)
    assert code == 0, output
    return Run(directory, output, n_ranks)


@pytest.fixture(scope="session", params=RANKS, ids=lambda n: f"np{n}")
def driver_run(
    request: pytest.FixtureRequest, workdir: Path, systems: dict[str, LammpsSystem]
) -> Run:
    """The Python driver over `driver_cases` (the driver attaches the handle)."""
    n_ranks = request.param
    directory = _run_dir(workdir, f"driver_np{n_ranks}")
    script = "".join(c.block() for c in driver_cases(systems, n_ranks))
    (directory / "in.cases").write_text(script)
    output = run_mpi(n_ranks, DRIVER, str(directory / "in.cases"), timeout=300)
    return Run(directory, output, n_ranks)


def attached_model_run(
    directory: Path, model_file: str, cases: dict[str, LammpsSystem], n_ranks: int
) -> Run:
    """The Python driver, the handle attached, over one model's `cases` (case name -> system)
    with the model file `directory / model_file` (written by the caller)."""
    for system in cases.values():
        write_data(directory / system.data, system.atoms, system.elements)
    blocks = "".join(
        model_case(case, model_file, system, n_ranks).block() for case, system in cases.items()
    )
    (directory / "in.cases").write_text(ATTACH_LINES + blocks)
    output = run_mpi(n_ranks, DRIVER, str(directory / "in.cases"), timeout=300)
    return Run(directory, output, n_ranks)
