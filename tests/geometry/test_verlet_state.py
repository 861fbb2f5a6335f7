from __future__ import annotations

import numpy as np
import pytest
import torch

from nvdd_plugins.geometry import VerletState, build_neighbor_list


def test_displacement_threshold() -> None:
    positions = torch.zeros((4, 3), dtype=torch.float64)
    cell = torch.eye(3, dtype=torch.float64) * 10.0
    verlet = VerletState(skin=1.0)
    assert verlet.stale(positions, cell)
    verlet.record(positions, cell)
    assert not verlet.stale(positions, cell)
    moved = positions.clone()
    moved[2] = torch.tensor([0.3, 0.3, 0.0], dtype=torch.float64)
    assert not verlet.stale(moved, cell)
    moved[3, 2] = 0.51
    assert verlet.stale(moved, cell)
    verlet.record(moved, cell)
    assert not verlet.stale(moved, cell)
    verlet.reset()
    assert verlet.stale(moved, cell)


def test_cell_pbc_numbers_and_count_changes() -> None:
    positions = torch.rand(5, 3)
    cell = torch.eye(3) * 4.0
    numbers = torch.tensor([1, 1, 8, 8, 6])
    verlet = VerletState(skin=0.5)
    verlet.record(positions, cell, (True, True, False), numbers)
    assert not verlet.stale(positions, cell, (True, True, False), numbers)
    assert verlet.stale(positions, cell * 1.0001, (True, True, False), numbers)
    assert verlet.stale(positions, None, (True, True, False), numbers)
    assert verlet.stale(positions, cell, True, numbers)
    assert verlet.stale(positions, cell, (True, True, False), numbers.flip(0))
    assert verlet.stale(positions[:4], cell, (True, True, False), numbers[:4])
    assert verlet.stale(torch.rand(6, 3), cell, (True, True, False), numbers)


def test_zero_skin_rebuilds_at_any_move() -> None:
    positions = torch.rand(3, 3)
    verlet = VerletState(skin=0.0)
    verlet.record(positions)
    assert not verlet.stale(positions)
    moved = positions.clone()
    moved[1, 0] = torch.nextafter(moved[1, 0], torch.tensor(2.0))
    assert verlet.stale(moved)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="skin"):
        VerletState(skin=-0.1)
    with pytest.raises(ValueError, match="shape"):
        VerletState(skin=0.1).record(torch.zeros(3))


def test_verlet_list_stays_valid_until_rebuild() -> None:
    rng = np.random.default_rng(0)
    cell = torch.tensor([[7.0, 0.0, 0.0], [2.0, 6.5, 0.0], [-1.0, 1.5, 7.5]], dtype=torch.float64)
    positions = torch.tensor(rng.uniform(0.0, 1.0, (40, 3))) @ cell
    cutoff, skin = 2.5, 0.6
    state = VerletState(skin=skin)
    verlet = None
    rebuilds = 0
    for _ in range(60):
        positions = positions + torch.tensor(rng.normal(0.0, 0.05, positions.shape))
        if state.stale(positions, cell, True):
            verlet = build_neighbor_list(positions, cell, True, cutoff + skin)
            state.record(positions, cell, True)
            rebuilds += 1
        exact = build_neighbor_list(positions, cell, True, cutoff)
        lengths = torch.linalg.vector_norm(verlet.edge_vectors(positions), dim=1)
        inside = lengths < cutoff
        kept = torch.cat((verlet.edge_index.T, verlet.unit_shifts), dim=1)[inside]
        expected = torch.cat((exact.edge_index.T, exact.unit_shifts), dim=1)
        assert len(kept) == len(expected)
        assert torch.equal(kept.unique(dim=0), expected.unique(dim=0))
    assert 1 < rebuilds < 60


def test_layout_only_state_follows_ids() -> None:
    """Without positions (a front end lists the pairs) only the row layout is compared."""
    state = VerletState()
    ids = torch.tensor([4, 0, 7])
    assert state.stale(None, ids=ids)
    state.record(None, ids=ids)
    assert not state.stale(None, ids=ids.clone())
    assert state.stale(None, ids=ids.flip(0))
    assert state.stale(None, ids=ids[:2])
    assert state.stale(torch.zeros(3, 3))  # no reference positions: stale


def test_stale_flag_matches_stale() -> None:
    state = VerletState(skin=1.0, threshold=0.2)
    positions = torch.zeros(2, 3, dtype=torch.float64)
    cell = torch.eye(3, dtype=torch.float64)
    assert state.stale(positions, cell)
    state.record(positions, cell)
    assert not state.stale(positions, cell)
    assert state.stale(positions, cell * 2.0)
    assert state.stale(positions[:1], cell)
    moved = positions.clone()
    moved[0, 0] = 0.25  # beyond the threshold, within skin / 2
    assert state.stale(moved, cell)


@pytest.mark.parametrize("growth", [None, 1.5])
def test_capacities(growth: float | None) -> None:
    state = VerletState(growth=growth)
    sizes = [state.rows.fit(n) for n in (10, 4, 11, 30)]
    if growth is None:
        assert sizes == [10, 4, 11, 30]
    else:
        assert sizes == [15, 15, 15, 45]
