"""AIMNet2 across real gloo ranks (the charge sums all-reduced between processes) equals
aimnet's own calculator in float64."""

from __future__ import annotations

import pytest

pytest.importorskip("aimnet")

from nvdd_plugins.comm import Communicator
from nvdd_plugins.models import AIMNet2Wrapper
from tests.helpers.aimnet_models import (
    aimnet_calculator,
    aimnet_reference,
    assert_aimnet_close,
    tiny_aimnet2,
    with_species,
)
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import properties_for, replicated
from tests.helpers.systems import SYSTEMS

pytestmark = [pytest.mark.multiprocess, pytest.mark.aimnet]

CASES = (("cluster", 1.0), ("bulk", 0.0))


def _wrapper(charge: float) -> AIMNet2Wrapper:
    calc = aimnet_calculator(tiny_aimnet2())
    return AIMNet2Wrapper(calc.model, calc.external_coulomb, charge=charge)


def _on_rank(comm: Communicator) -> dict[str, dict]:
    results = {}
    for system, charge in CASES:
        atoms = with_species(SYSTEMS[system]())
        properties = (*properties_for(atoms), "charges")
        results[system] = replicated(comm, _wrapper(charge), atoms, properties)
    return results


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_ranks_match_aimnet(world_size: int) -> None:
    reports = run_gloo(world_size, _on_rank, timeout=240)
    for system, charge in CASES:
        atoms = with_species(SYSTEMS[system]())
        ref = aimnet_reference(aimnet_calculator(tiny_aimnet2()), atoms, charge)
        for rank, report in enumerate(reports):
            result = report[system]
            errs = {k: float((result[k] - ref[k]).abs().max()) for k in ref}
            errs["energy"] /= len(atoms)
            assert_aimnet_close(errs, f"{system}/rank{rank}")
