"""The tiny two-species MACE through LAMMPS at 1, 2 and 4 ranks equals mace-torch's own
MACECalculator (periodic triclinic box and slab with vacuum)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)
pytest.importorskip("mace")

from tests.helpers.mace_models import mace_calculator_reference, tiny_mace
from tests.helpers.oracle import assert_close
from tests.lammps.references import Reference, deviations

pytestmark = [pytest.mark.lammps, pytest.mark.mace]

SYSTEM_OF = {"mace_bulk": "bulk_mix", "mace_slab": "slab_mix"}


@pytest.fixture(scope="module")
def references(systems) -> dict[str, Reference]:
    """MACECalculator results per case."""
    model = tiny_mace()
    out = {}
    for case, system in SYSTEM_OF.items():
        ref = mace_calculator_reference(model, systems[system].atoms)
        out[case] = {k: np.asarray(v) for k, v in ref.items()}
        out[case]["stress"] = out[case]["stress"][0]
    return out


@pytest.mark.parametrize("case", sorted(SYSTEM_OF))
def test_matches_mace_calculator(driver_run, systems, references, case: str) -> None:
    atoms = systems[SYSTEM_OF[case]].atoms
    errs = deviations(driver_run.snapshot(case), references[case], atoms)
    print(f"{case} np{driver_run.n_ranks}: {errs}")
    assert_close(errs, f"{case} np{driver_run.n_ranks}")
