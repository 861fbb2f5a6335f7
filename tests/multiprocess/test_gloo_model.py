"""DistributedModel across real gloo ranks equals the single-process run."""

from __future__ import annotations

import importlib.util

import pytest

from nvdd_plugins.comm import Communicator
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated
from tests.helpers.systems import SYSTEMS, lj_model, mpnn_model

MACE_AVAILABLE = importlib.util.find_spec("mace") is not None
if MACE_AVAILABLE:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import mace_calculator_reference, tiny_mace, with_two_species

pytestmark = pytest.mark.multiprocess


def _all_cases(comm: Communicator) -> dict[str, dict[str, float]]:
    """Every model × system on this rank; returns the deviations from the oracle."""
    report = {}
    for model_name, factory in (("lj", lj_model), ("mpnn", mpnn_model)):
        model = factory()
        for system, build in SYSTEMS.items():
            atoms = build()
            properties = properties_for(atoms)
            ref = reference(model, atoms, properties)
            result = replicated(comm, model, atoms, properties)
            report[f"{model_name}/{system}"] = errors(result, ref, len(atoms))
        slab = SYSTEMS["slab"]()
        grid = (1, 1, comm.size)
        result = replicated(comm, model, slab, ("energy", "forces", "stress"), grid=grid)
        ref = reference(model, slab, ("energy", "forces", "stress"))
        report[f"{model_name}/slab-z-split"] = errors(result, ref, len(slab))
    if MACE_AVAILABLE:
        model = tiny_mace()
        wrapper = MACEWrapper(model)
        for system in ("bulk", "slab"):
            atoms = with_two_species(SYSTEMS[system]())
            ref = mace_calculator_reference(model, atoms)
            result = replicated(comm, wrapper, atoms, properties_for(atoms))
            report[f"mace/{system}"] = errors(result, ref, len(atoms))
    return report


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_ranks_match_single_process(world_size: int) -> None:
    reports = run_gloo(world_size, _all_cases, timeout=240)
    for rank, report in enumerate(reports):
        for label, errs in report.items():
            assert_close(errs, f"rank {rank}: {label}")
