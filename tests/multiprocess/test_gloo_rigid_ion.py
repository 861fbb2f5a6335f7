"""Ewald and PME across real gloo ranks (the ASE calculator's layout, every rank holding the
system): exact against one process, and wrong without the all-reduce of the reciprocal
sums (the negative control, on the same ranks)."""

from __future__ import annotations

import pytest

from nvdd_plugins.comm import Communicator
from tests.helpers.ionic import PartialSumsOnly, nacl_model, triclinic_nacl
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated

pytestmark = pytest.mark.multiprocess

METHODS = ("ewald", "pme", "pme slabs")
CONTROLS = ("ewald", "pme")  # the slabs' mesh is not an all-reduce


def _on_rank(comm: Communicator) -> dict[str, dict]:
    atoms = triclinic_nacl()
    properties = properties_for(atoms)
    results = {}
    for method in METHODS:
        results[method] = replicated(comm, nacl_model(method, atoms), atoms, properties)
        if method not in CONTROLS:
            continue
        control = nacl_model(method, atoms, PartialSumsOnly)
        results[f"{method} without all-reduce"] = replicated(comm, control, atoms, properties)
    return results


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_gloo_ranks_match_one_process(world_size: int) -> None:
    reports = run_gloo(world_size, _on_rank, timeout=300)
    atoms = triclinic_nacl()
    for method in METHODS:
        ref = reference(nacl_model(method, atoms), atoms, properties_for(atoms))
        for rank, report in enumerate(reports):
            assert_close(errors(report[method], ref, len(atoms)), f"{method}/rank{rank}")
            if world_size > 1 and method in CONTROLS:
                control = errors(report[f"{method} without all-reduce"], ref, len(atoms))
                assert control["energy"] > 1e-3 and control["forces"] > 1e-2, (
                    f"{method}/rank{rank}: without the all-reduce the result should be wrong, "
                    f"but is within {control}"
                )
