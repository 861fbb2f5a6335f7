"""PME with its mesh distributed in slabs (simulated ranks): every rank exact against one
process (float64), with odd rank counts, ranks that own no atoms, graph partition and
nvalchemiops' scheme; the "auto" layout rule; the box of mesh planes a rank's atoms need."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
import torch
from ase.build import bulk

from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import PME, Ewald, RigidIonModel, pme_slabs
from nvdd_plugins.models.pme import SLAB_MESH_POINTS
from nvdd_plugins.models.rigid_ion import NACL_CHARGES, TOSI_FUMI_NACL
from tests.helpers.ionic import CUTOFF, triclinic_nacl
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated

ALPHA = Ewald.for_accuracy(CUTOFF, 1e-5).alpha


def _model(pme: PME) -> RigidIonModel:
    return RigidIonModel(NACL_CHARGES, TOSI_FUMI_NACL, CUTOFF, pme)


def _every_rank(model, atoms, world_size: int, **options) -> list[dict]:
    """Each rank's results, and how often the slab path ran (per rank)."""
    calls = []

    def counted(*args):
        calls.append(1)
        return slab_energies(*args)

    slab_energies = pme_slabs.slab_energies
    properties = properties_for(atoms)
    with mock.patch("nvdd_plugins.models.pme.slab_energies", counted):
        results = run_simulated(
            world_size, lambda comm: replicated(comm, model, atoms, properties, **options)
        )
    assert len(calls) >= world_size, "the slab path did not run"
    return results


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize(("order", "scheme"), [(4, "spme"), (5, "nvalchemiops")])
def test_slabs_match_one_process(world_size: int, order: int, scheme: str) -> None:
    atoms = triclinic_nacl()
    model = _model(PME(ALPHA, (24, 20, 18), order, scheme, layout="slabs"))
    ref = reference(model, atoms, properties_for(atoms))
    whole = reference(_model(replace(model.electrostatics, layout="whole")), atoms, ("energy",))
    assert torch.allclose(ref["energy"], whole["energy"], rtol=0, atol=1e-12)
    for rank, result in enumerate(_every_rank(model, atoms, world_size)):
        assert_close(errors(result, ref, len(atoms)), f"{world_size}/rank{rank}")


def test_ranks_without_atoms_and_graph_partition() -> None:
    """Eight ions in a corner of a large cell: at 8 ranks seven own nothing (no box)."""
    atoms = bulk("NaCl", "rocksalt", a=5.64, cubic=True)
    atoms.positions += np.random.default_rng(1).normal(scale=0.1, size=(8, 3)) + 1.0
    atoms.set_cell([16.0, 15.0, 17.0])
    model = _model(PME(ALPHA, (20, 18, 18), 4, layout="slabs"))
    ref = reference(model, atoms, properties_for(atoms))
    results = _every_rank(model, atoms, 8, balance="off")
    assert sorted(int(r["n_owned"]) for r in results)[:7] == [0] * 7
    for result in results + _every_rank(model, atoms, 3, strategy=StrategyKind.GRAPH_PARTITION):
        assert_close(errors(result, ref, len(atoms)), "sparse")


def test_the_auto_layout_keeps_large_meshes_in_slabs() -> None:
    small, large = PME(ALPHA, (16, 16, 16)), PME(ALPHA, (64, 64, 64))
    assert not small.uses_slabs(2) and large.uses_slabs(2) and large.uses_slabs(8)
    assert not PME(ALPHA, (64, 64, 64), layout="whole").uses_slabs(8)
    assert not PME(ALPHA, (8, 64, 64), layout="slabs").uses_slabs(16)  # a plane per rank
    assert 64**3 >= 8 * SLAB_MESH_POINTS > 16**3 * 2
    with pytest.raises(ValueError, match="layout must be"):
        PME(ALPHA, (16, 16, 16), layout="pencils")


@pytest.mark.parametrize(
    ("planes", "expected"),
    [
        ([], (0, 0)),
        ([3, 4, 7], (3, 5)),
        ([0, 1, 9], (9, 3)),
        ([0, 3, 6, 9], (3, 8)),
        (list(range(10)), (0, 10)),
    ],
)
def test_covering_arc_is_the_shortest_periodic_run(planes, expected) -> None:
    """On a periodic axis of 10 planes; every plane used: the whole axis from 0."""
    points = torch.tensor(planes, dtype=torch.long)
    first, length = pme_slabs.covering_arc(points, 10)
    assert (first, length) == expected
    assert all((p - first) % 10 < length for p in planes)
