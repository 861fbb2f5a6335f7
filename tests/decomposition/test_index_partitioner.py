"""Graph-partition ownership: balanced contiguous slices of a Morton order."""

from __future__ import annotations

import itertools

import torch

from nvdd_plugins.decomposition import (
    DecompositionFrame,
    index_owners,
    morton_order,
)


def test_morton_order_of_a_2x2x2_grid_interleaves_x_lowest() -> None:
    cell = torch.eye(3, dtype=torch.float64) * 2.0
    points = [(x, y, z) for z, y, x in itertools.product((0.5, 1.5), repeat=3)]
    positions = torch.tensor(points, dtype=torch.float64)[torch.randperm(8)]
    frame = DecompositionFrame(torch.zeros(3, dtype=torch.float64), cell, torch.ones(3).bool())
    ordered = positions[morton_order(positions, frame)]
    assert torch.equal(ordered, torch.tensor(points, dtype=torch.float64))


def test_slices_are_balanced() -> None:
    generator = torch.Generator().manual_seed(0)
    positions = torch.rand(103, 3, generator=generator, dtype=torch.float64) * 10.0
    cell, pbc = torch.eye(3, dtype=torch.float64) * 10.0, torch.tensor([True, True, False])
    for size in (1, 2, 3, 4, 7):
        by_row = index_owners(positions, cell, pbc, size)
        assert sorted(torch.bincount(by_row, minlength=size).tolist())[::-1] in (
            [103 // size + 1] * (103 % size) + [103 // size] * (size - 103 % size),
        )


def test_slices_are_compact_in_space() -> None:
    """Morton slices of a uniform box span a fraction of it (an index split of randomly
    ordered atoms spans all of it)."""
    generator = torch.Generator().manual_seed(1)
    positions = torch.rand(512, 3, generator=generator, dtype=torch.float64) * 20.0
    cell, pbc = torch.eye(3, dtype=torch.float64) * 20.0, torch.zeros(3).bool()
    owner = index_owners(positions, cell, pbc, 8)
    spread = [float(positions[owner == r].std(dim=0).mean()) for r in range(8)]
    assert sum(spread) / 8 < 0.65 * float(positions.std(dim=0).mean())
