"""Pretrained SevenNet-0 through LAMMPS: the model file written by the CLI
(`python -m lammps_interface --sevennet 7net-0`), `pair_style mliap unified` under the Python
driver with the handle attached, at 1, 2 and 4 ranks (test-all), equals sevenn's own float64
forward on MgO: a triclinic cell narrower than twice the cutoff and a slab with vacuum."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)
pytest.importorskip("sevenn")

from lammps_interface.cli import main
from tests.helpers.materials import MATERIALS
from tests.helpers.oracle import assert_close
from tests.helpers.sevennet_models import pretrained_sevennet, sevennet_reference
from tests.lammps.cases import LammpsSystem
from tests.lammps.conftest import Run, attached_model_run
from tests.lammps.lammps_io import lammps_frame
from tests.lammps.references import deviations

pytestmark = [pytest.mark.lammps, pytest.mark.sevenn]

ELEMENTS = ("Mg", "O")
CASES = ("triclinic", "slab")
# test-all only: each rank unpickles SevenNet-0 (35 s at np2); CI: the tiny SevenNet through
# LAMMPS (tests/lammps/test_sevennet.py) and SevenNet-0 at 4 real gloo ranks
RANKS = [pytest.param(n, marks=pytest.mark.slow) for n in (1, 2, 4)]


def _system(name: str) -> LammpsSystem:
    atoms = lammps_frame(MATERIALS[name]())
    boundary = " ".join("p" if p else "f" for p in atoms.pbc)
    return LammpsSystem(atoms, f"{name}.data", ELEMENTS, boundary)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sevennet0") / "sevennet0.pkl"
    main(["--sevennet", "7net-0", "--elements", *ELEMENTS, "-o", str(path)])
    return path


@pytest.fixture(scope="module", params=RANKS, ids=lambda n: f"np{n}")
def sevennet0_run(request: pytest.FixtureRequest, model_file: Path) -> Run:
    cases = {name: _system(name) for name in CASES}
    return attached_model_run(model_file.parent, model_file.name, cases, request.param)


@pytest.mark.parametrize("case", CASES)
def test_matches_sevenn_forward(sevennet0_run: Run, case: str) -> None:
    atoms = _system(case).atoms
    model = copy.deepcopy(pretrained_sevennet().model)  # sevennet_reference changes it
    reference = {k: v.numpy() for k, v in sevennet_reference(model, atoms).items()}
    reference["stress"] = reference["stress"][0]
    errs = deviations(sevennet0_run.snapshot(case), reference, atoms)
    print(f"{case} np{sevennet0_run.n_ranks}: {errs}")
    assert_close(errs, f"{case} np{sevennet0_run.n_ranks}")
