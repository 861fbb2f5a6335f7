"""Global-reduction ensembles across real gloo ranks: the single-process trajectory, and
replicated state (chains, cell) bit-identical on every rank."""

from __future__ import annotations

import ase.units
import pytest

from nvdd_plugins import Batch
from nvdd_plugins.comm import Communicator
from nvdd_plugins.dynamics import FIRE, NPT, MTKParameters, NoseHoover
from tests.helpers.ensembles import (
    domain_parallel,
    max_deviation,
    same_replicated_state,
    single_process,
)
from tests.helpers.multiprocess import run_gloo
from tests.helpers.systems import MD_DT_FS, MD_SKIN, hot_bulk, triclinic_bulk

pytestmark = pytest.mark.multiprocess

N_STEPS = 80  # FIRE converges at step 74
CASES = {
    "nose_hoover": (lambda m: NoseHoover(m, MD_DT_FS, 300.0, 100.0, skin=MD_SKIN), hot_bulk),
    "npt_anisotropic": (
        lambda m: NPT(
            m,
            MD_DT_FS,
            300.0,
            0.1 * ase.units.GPa,
            MTKParameters(100.0, 400.0),
            anisotropic=True,
            skin=MD_SKIN,
        ),
        hot_bulk,
    ),
    "fire": (
        lambda m: FIRE(m, fmax=1e-3, skin=MD_SKIN),
        lambda: Batch.from_atoms(triclinic_bulk()),
    ),
}


def _runs(comm: Communicator) -> dict[str, dict]:
    return {
        name: domain_parallel(comm, factory, system, N_STEPS)
        for name, (factory, system) in CASES.items()
    }


def test_gloo_ranks_match_one_process_with_identical_replicated_state() -> None:
    reports = run_gloo(2, _runs, timeout=240)
    for name, (factory, system) in CASES.items():
        expected = single_process(factory, system, N_STEPS)
        results = [report[name] for report in reports]
        for result in results:
            assert max_deviation(result, expected) < 1e-8, name
            assert result["steps"] == expected["steps"], name
        assert same_replicated_state(results), name
