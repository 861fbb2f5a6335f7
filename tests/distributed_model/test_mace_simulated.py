"""MACE under DistributedModel (simulated ranks) equals mace-torch's MACECalculator."""

from __future__ import annotations

import pytest

pytest.importorskip("mace")

from nvdd_plugins.comm import run_simulated
from nvdd_plugins.models import MACEWrapper
from tests.helpers.mace_models import (
    mace_calculator_reference,
    tiny_mace,
    with_two_species,
)
from tests.helpers.oracle import assert_close, errors, properties_for, replicated
from tests.helpers.systems import SYSTEMS

pytestmark = pytest.mark.mace


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", ["bulk", "slab", "cluster"])
def test_mace_matches_mace_calculator(system: str, world_size: int) -> None:
    model = tiny_mace()
    atoms = with_two_species(SYSTEMS[system]())
    ref = mace_calculator_reference(model, atoms)
    wrapper = MACEWrapper(model)
    properties = properties_for(atoms)
    grid = (1, 1, world_size) if system == "slab" else None
    results = run_simulated(
        world_size, lambda comm: replicated(comm, wrapper, atoms, properties, grid=grid)
    )
    for rank, result in enumerate(results):
        assert_close(errors(result, ref, len(atoms)), f"{system}/rank{rank}")
