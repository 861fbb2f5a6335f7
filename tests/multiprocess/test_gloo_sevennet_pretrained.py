"""Pretrained SevenNet-0 (sevenn's wheel, float64) across real gloo ranks (1, 2, 4 processes)
(1 and 2 in test-all)
equals sevenn's own forward on MgO: a triclinic cell narrower than twice the cutoff, a slab
with vacuum (ranks stacked across it: some own no atoms) and a cluster in vacuum; the wider
bulk in test-all."""

from __future__ import annotations

import pytest

pytest.importorskip("sevenn")

from nvdd_plugins.comm import Communicator
from tests.conftest import all_tests
from tests.helpers.materials import MATERIALS
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import assert_close, errors, properties_for, replicated
from tests.helpers.sevennet_models import pretrained_reference, pretrained_sevennet

pytestmark = [pytest.mark.multiprocess, pytest.mark.sevenn]


def _systems() -> tuple[str, ...]:
    return (
        ("triclinic", "slab", "cluster", "bulk")
        if all_tests()
        else ("triclinic", "slab", "cluster")
    )


def _on_rank(comm: Communicator, systems: tuple[str, ...]) -> dict[str, dict]:
    results = {}
    for system in systems:
        atoms = MATERIALS[system]()
        options = {"grid": (1, 1, comm.size), "balance": "off"} if system == "slab" else {}
        model = pretrained_sevennet()  # loaded before the fork
        results[system] = replicated(comm, model, atoms, properties_for(atoms), **options)
    return results


# CI: 4 ranks (a 2 x 2 grid and empty sub-domains); 1 and 2 in test-all (one process:
# tests/models/test_sevennet_pretrained.py)
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "world_size", [pytest.param(1, marks=SLOW), pytest.param(2, marks=SLOW), 4]
)
def test_gloo_ranks_match_sevenn(world_size: int) -> None:
    systems = _systems()
    pretrained_sevennet()
    references = {system: pretrained_reference(system) for system in systems}
    reports = run_gloo(world_size, _on_rank, systems, timeout=300)
    for system in systems:
        n_atoms = len(MATERIALS[system]())
        for rank, report in enumerate(reports):
            assert_close(errors(report[system], references[system], n_atoms), f"{system}/{rank}")
        if system == "slab" and world_size == 4:
            assert min(int(report[system]["n_owned"]) for report in reports) == 0
