"""SevenNet through LAMMPS (`pair_style mliap unified`, Python driver, the handle attached
for the per-layer ghost exchange) at 1, 2 and 4 ranks (4 in test-all) equals sevenn's own
forward (its graph and its force/stress head) on a two-species bulk and slab. The model file
is a pickle of the e3nn >= 0.5 model, which needs the `.venv-e3nn` overlay."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)
pytest.importorskip("sevenn")


from lammps_interface import MLIAPModel
from nvdd_plugins.models import SevenNetWrapper
from tests.helpers.oracle import assert_close
from tests.helpers.sevennet_models import sevennet_reference, tiny_sevennet
from tests.lammps.cases import LammpsSystem
from tests.lammps.conftest import MODEL_RANKS, Run, attached_model_run
from tests.lammps.references import deviations

pytestmark = [pytest.mark.lammps]

CASES = {"sevennet_bulk": "bulk_mix", "sevennet_slab": "slab_mix"}


@pytest.fixture(scope="module", params=MODEL_RANKS, ids=lambda n: f"np{n}")
def sevennet_run(request, tmp_path_factory, systems: dict[str, LammpsSystem]) -> Run:
    n_ranks = request.param
    directory = tmp_path_factory.mktemp(f"sevennet_np{n_ranks}")
    model = MLIAPModel(SevenNetWrapper(tiny_sevennet()), ["Ar", "Cu"])
    model.pickle(directory / "sevennet.pkl")
    cases = {case: systems[system] for case, system in CASES.items()}
    return attached_model_run(Path(directory), "sevennet.pkl", cases, n_ranks)


@pytest.mark.parametrize("case", CASES)
def test_matches_sevennet_forward(sevennet_run, systems, case: str) -> None:
    atoms = systems[CASES[case]].atoms
    reference = {k: v.numpy() for k, v in sevennet_reference(tiny_sevennet(), atoms).items()}
    reference["stress"] = reference["stress"][0]
    errs = deviations(sevennet_run.snapshot(case), reference, atoms)
    print(f"{case} np{sevennet_run.n_ranks}: {errs}")
    assert_close(errs, f"{case} np{sevennet_run.n_ranks}")
