from __future__ import annotations

import numpy as np
import pytest
import torch

from nvdd_plugins.geometry import RebuildDetector, build_neighbor_list


def test_displacement_threshold() -> None:
    positions = torch.zeros((4, 3), dtype=torch.float64)
    cell = torch.eye(3, dtype=torch.float64) * 10.0
    detector = RebuildDetector(skin=1.0)
    assert not detector.has_reference
    assert detector.needs_rebuild(positions, cell)
    detector.update(positions, cell)
    assert detector.has_reference
    assert not detector.needs_rebuild(positions, cell)
    moved = positions.clone()
    moved[2] = torch.tensor([0.3, 0.3, 0.0], dtype=torch.float64)
    assert not detector.needs_rebuild(moved, cell)
    torch.testing.assert_close(
        detector.max_displacement(moved), torch.tensor(0.3 * 2**0.5).double()
    )
    moved[3, 2] = 0.51
    assert detector.needs_rebuild(moved, cell)
    detector.update(moved, cell)
    assert not detector.needs_rebuild(moved, cell)
    detector.reset()
    assert detector.needs_rebuild(moved, cell)


def test_cell_pbc_numbers_and_count_changes() -> None:
    positions = torch.rand(5, 3)
    cell = torch.eye(3) * 4.0
    numbers = torch.tensor([1, 1, 8, 8, 6])
    detector = RebuildDetector(skin=0.5)
    detector.update(positions, cell, (True, True, False), numbers)
    assert not detector.needs_rebuild(positions, cell, (True, True, False), numbers)
    assert detector.needs_rebuild(positions, cell * 1.0001, (True, True, False), numbers)
    assert detector.needs_rebuild(positions, None, (True, True, False), numbers)
    assert detector.needs_rebuild(positions, cell, True, numbers)
    assert detector.needs_rebuild(positions, cell, (True, True, False), numbers.flip(0))
    assert detector.needs_rebuild(positions[:4], cell, (True, True, False), numbers[:4])
    assert detector.needs_rebuild(torch.rand(6, 3), cell, (True, True, False), numbers)


def test_zero_skin_always_rebuilds() -> None:
    positions = torch.rand(3, 3)
    detector = RebuildDetector(skin=0.0)
    detector.update(positions)
    assert detector.needs_rebuild(positions)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="skin"):
        RebuildDetector(skin=-0.1)
    with pytest.raises(RuntimeError, match="update"):
        RebuildDetector(skin=0.1).max_displacement(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="shape"):
        RebuildDetector(skin=0.1).update(torch.zeros(3))


def test_verlet_list_stays_valid_until_rebuild() -> None:
    rng = np.random.default_rng(0)
    cell = torch.tensor([[7.0, 0.0, 0.0], [2.0, 6.5, 0.0], [-1.0, 1.5, 7.5]], dtype=torch.float64)
    positions = torch.tensor(rng.uniform(0.0, 1.0, (40, 3))) @ cell
    cutoff, skin = 2.5, 0.6
    detector = RebuildDetector(skin=skin)
    verlet = None
    rebuilds = 0
    for _ in range(60):
        positions = positions + torch.tensor(rng.normal(0.0, 0.05, positions.shape))
        if detector.needs_rebuild(positions, cell, True):
            verlet = build_neighbor_list(positions, cell, True, cutoff + skin)
            detector.update(positions, cell, True)
            rebuilds += 1
        exact = build_neighbor_list(positions, cell, True, cutoff)
        lengths = torch.linalg.vector_norm(verlet.edge_vectors(positions), dim=1)
        inside = lengths < cutoff
        kept = torch.cat((verlet.edge_index.T, verlet.unit_shifts), dim=1)[inside]
        expected = torch.cat((exact.edge_index.T, exact.unit_shifts), dim=1)
        assert len(kept) == len(expected)
        assert torch.equal(kept.unique(dim=0), expected.unique(dim=0))
    assert 1 < rebuilds < 60
