"""The heat flux across real gloo ranks: `HeatFluxLogger` under `DomainParallel` records the
one-process series (LJ, the 3-layer MPNN) and MACE's per-atom heat-flux tensors equal the
unfolded oracle."""

from __future__ import annotations

import importlib.util

import pytest

from nvdd_plugins import Batch
from nvdd_plugins.comm import Communicator
from nvdd_plugins.models import HEAT_FLUX_TENSORS, evaluate_model
from tests.dynamics.test_heat_flux import SERIES_TOL, _domain_parallel, _one_process
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import replicated
from tests.helpers.systems import SYSTEMS, hot_bulk, lj_model, mpnn_model

pytestmark = pytest.mark.multiprocess

MACE_AVAILABLE = importlib.util.find_spec("mace") is not None
PROPERTIES = ("energy", "forces", HEAT_FLUX_TENSORS)
FACTORIES = {"lj": lj_model, "mpnn": mpnn_model}


def _mace_atoms():
    from tests.helpers.mace_models import with_two_species

    return with_two_species(SYSTEMS["bulk"]())


def _mace():
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace())


def _on_rank(comm: Communicator, with_mace: bool) -> dict[str, object]:
    full = hot_bulk()
    found: dict[str, object] = {
        name: _domain_parallel(comm, factory(), full) for name, factory in FACTORIES.items()
    }
    if with_mace:
        found["mace"] = replicated(comm, _mace(), _mace_atoms(), PROPERTIES)[HEAT_FLUX_TENSORS]
    return found


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_ranks_match_single_process(world_size: int) -> None:
    """MACE at 2 ranks (at 1, 2 and 4 simulated ranks in test_heat_flux.py)."""
    full = hot_bulk()
    expected = {name: _one_process(factory(), full) for name, factory in FACTORIES.items()}
    with_mace = MACE_AVAILABLE and world_size == 2
    reports = run_gloo(world_size, _on_rank, with_mace, timeout=240)
    if with_mace:
        mace = evaluate_model(_mace(), Batch.from_atoms(_mace_atoms()), PROPERTIES)
    for rank, found in enumerate(reports):
        for name, series in expected.items():
            scale = float(series["total"].abs().max())
            for part in ("convective", "potential"):
                error = float((found[name][part] - series[part]).abs().max()) / scale
                assert error < SERIES_TOL, (rank, name, part, error)
        if with_mace:
            error = float((found["mace"] - mace[HEAT_FLUX_TENSORS]).abs().max())
            assert error < 1e-10, (rank, "mace", error)
