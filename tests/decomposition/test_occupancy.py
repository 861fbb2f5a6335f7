"""`BinGrid` and `KeyRuns`: two atoms closer than the width sit in adjacent bins (periodic
faces, triclinic cells, open axes, atoms outside the cell), and runs hold exactly their keys."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.decomposition import BinGrid, KeyRuns
from nvdd_plugins.geometry import build_neighbor_list

SKEWED = torch.tensor([[14.0, 0.0, 0.0], [5.0, 13.0, 0.0], [-3.0, 4.0, 12.0]])
CELLS = {
    "cubic": (torch.eye(3) * 17.0, (True, True, True)),
    "triclinic": (SKEWED, (True, True, True)),
    "narrow": (torch.eye(3) * torch.tensor([9.0, 30.0, 20.0]), (True, True, True)),
    "slab": (torch.eye(3) * 16.0, (True, True, False)),
    "open": (torch.zeros(3, 3), (False, False, False)),
}


@pytest.mark.parametrize("name", CELLS)
def test_pairs_within_the_width_sit_in_adjacent_bins(name: str) -> None:
    cell, pbc = CELLS[name]
    cell, pbc = cell.double(), torch.tensor(pbc)
    generator = torch.Generator().manual_seed(0)
    frac = torch.rand(300, 3, generator=generator, dtype=torch.float64) * 1.6 - 0.3
    extent = cell if bool(pbc.any()) else torch.eye(3, dtype=torch.float64) * 25.0
    positions = frac @ extent  # atoms outside the cell too
    width = 4.0
    i, j = build_neighbor_list(positions, cell, pbc, width).edge_index
    assert i.numel() > 100

    def adjacent(grid: BinGrid) -> torch.Tensor:
        bins = grid.bins(positions)
        around = BinGrid.keys(grid.around(bins[i]))  # (E, 27)
        return (around == BinGrid.keys(bins[j]).unsqueeze(1)).any(dim=1)

    grid = BinGrid.of(cell, pbc, width)
    assert bool(adjacent(grid).all())
    assert bool((grid.counts[pbc] >= 1).all()) and bool((grid.counts[~pbc] == 0).all())
    assert not bool(adjacent(BinGrid.of(cell, pbc, width / 2.5)).all())  # negative control


def test_periodic_bins_wrap_and_are_at_least_the_width_thick() -> None:
    cell = torch.eye(3, dtype=torch.float64) * 10.0
    grid = BinGrid.of(cell, torch.tensor([True, True, True]), 3.0)
    assert grid.counts.tolist() == [3, 3, 3]
    bins = grid.bins(torch.tensor([[-0.1, 10.1, 25.0]], dtype=torch.float64))
    assert bins.tolist() == [[2, 0, 1]]
    assert set(grid.around(bins)[0, :, 0].tolist()) == {0, 1, 2}


def test_runs_hold_exactly_their_keys() -> None:
    keys = torch.tensor([7, 3, 4, 5, 5, 10, 11, 20])
    runs = KeyRuns.of(keys)
    assert runs.table.tolist() == [[3, 6], [7, 8], [10, 12], [20, 21]]
    probe = torch.arange(0, 25)
    assert runs.contains(probe).tolist() == [int(k) in set(keys.tolist()) for k in probe]
    assert runs.meets(torch.tensor([8, 9, 11])) and not runs.meets(torch.tensor([6, 8, 9, 12]))
    empty = KeyRuns.of(torch.empty(0, dtype=torch.long))
    assert not empty.contains(probe).any() and not empty.meets(probe)
