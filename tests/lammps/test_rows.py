"""What the bridge makes of an ML-IAP pair list (no LAMMPS run): symmetric edges, positions
rebuilt from pair vectors, the fallback's ghost-list check, and pair forces."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.lammps.jobs import missing_lammps

if (reason := missing_lammps()) is not None:
    pytest.skip(reason, allow_module_level=True)

from lammps_interface.fallback import RedundantBridge, positions_from_pairs
from lammps_interface.rows import LocalRows
from tests.helpers.systems import mpnn_model

pytestmark = pytest.mark.lammps


def _data(x: np.ndarray, nlocal: int, cutoff: float, ghost_centres: bool) -> SimpleNamespace:
    """An ML-IAP-like data object: a full list around owned rows (and ghosts if asked)."""
    centres = x.shape[0] if ghost_centres else nlocal
    i, j = np.nonzero(np.linalg.norm(x[None, :] - x[:centres, None], axis=-1) < cutoff)
    keep = i != j
    i, j = i[keep], j[keep]
    return SimpleNamespace(
        nlocal=nlocal,
        ntotal=x.shape[0],
        npairs=i.size,
        elems=np.zeros(x.shape[0], dtype=np.int32),
        pair_i=i.astype(np.int32),
        pair_j=j.astype(np.int32),
        rij=x[j] - x[i],
        nlistatoms=nlocal,
        iatoms=np.arange(centres, dtype=np.int32),
    )


def _cloud(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 8.0, size=(n, 3))


@pytest.mark.parametrize("ghost_centres", [False, True])
def test_edges_list_each_owned_pair_once_per_direction(ghost_centres: bool) -> None:
    x, nlocal, cutoff = _cloud(40), 25, 3.0
    rows = LocalRows.from_data(_data(x, nlocal, cutoff, ghost_centres), np.array([18]))
    edges, vectors = (t.numpy() for t in rows.edges(ghost_pairs=ghost_centres))
    pairs = set(map(tuple, edges.T.tolist()))
    assert len(pairs) == edges.shape[1]
    for a, b in pairs:
        assert (b, a) in pairs
        assert a < nlocal or b < nlocal or ghost_centres
    distance = np.linalg.norm(x[:, None] - x[None], axis=-1)
    expected = {
        (a, b)
        for a, b in zip(*np.nonzero(distance < cutoff), strict=True)
        if a != b and (min(a, b) < nlocal or ghost_centres)
    }
    assert pairs == expected
    np.testing.assert_allclose(vectors, x[edges[1]] - x[edges[0]], atol=1e-14)


def test_positions_from_pairs_up_to_one_translation_per_component() -> None:
    x = np.concatenate([_cloud(30, 1), _cloud(20, 2) + 100.0, [[50.0, 50.0, 50.0]]])
    rows = LocalRows.from_data(_data(x, 51, 3.5, ghost_centres=True), np.array([18]))
    edges, vectors = (t.numpy() for t in rows.edges(ghost_pairs=True))
    rebuilt = positions_from_pairs(len(x), edges, vectors)
    np.testing.assert_allclose(rebuilt[edges[1]] - rebuilt[edges[0]], vectors, atol=1e-12)
    assert np.allclose(rebuilt[50], 0.0)  # an isolated row sits at the origin


def test_fallback_refuses_a_list_without_ghost_pairs() -> None:
    x = _cloud(40)
    rows = LocalRows.from_data(_data(x, 25, 4.5, ghost_centres=False), np.array([18]))
    with pytest.raises(RuntimeError, match="pair_style mliap unified <file> 1"):
        RedundantBridge(mpnn_model(), torch.float64, n_layers=3).evaluate(rows)


def test_fallback_on_a_rank_without_owned_atoms_is_empty() -> None:
    rows = LocalRows.from_data(_data(_cloud(10), 0, 3.0, ghost_centres=True), np.array([18]))
    result = RedundantBridge(mpnn_model(), torch.float64, n_layers=3).evaluate(rows)
    assert not result.forces.any() and not result.energies.any()


@pytest.mark.parametrize("ghost_centres", [False, True])
def test_pair_forces_add_up_to_the_row_forces(ghost_centres: bool) -> None:
    """What `update_pair_forces` does with the pair forces (f_i += fij, f_j -= fij) gives the
    autograd forces of every row; pairs centred on a ghost with an owned neighbour get 0."""
    x, nlocal = _cloud(60), 30
    rows = LocalRows.from_data(_data(x, nlocal, 4.5, ghost_centres), np.array([18]))
    bridge = RedundantBridge(mpnn_model(), torch.float64, n_layers=1)
    result = bridge.evaluate(rows, pair_forces=True)
    summed = np.zeros_like(result.forces)
    pair_i, pair_j = rows.pair_i.numpy(), rows.pair_j.numpy()
    np.add.at(summed, pair_i, result.pair_forces)
    np.add.at(summed, pair_j, -result.pair_forces)
    assert np.abs(summed - result.forces).max() < 1e-12
    assert np.abs(result.forces).max() > 1e-3
    reversed_ghost_pairs = (pair_i >= nlocal) & (pair_j < nlocal)
    assert not result.pair_forces[reversed_ghost_pairs].any()
