"""Staggered cuts: ownership lookup, balanced shares, and the same cuts on any rank split."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.comm import run_simulated
from nvdd_plugins.decomposition import StaggeredCuts, balanced_cuts, imbalance, in_one_process
from nvdd_plugins.decomposition.balance import BINS


def _blob(n: int, seed: int) -> torch.Tensor:
    """Fractional coordinates of an off-centre dense blob plus a thin vapour, wrapped."""
    generator = torch.Generator().manual_seed(seed)
    dense = 0.8 + 0.08 * torch.randn(n, 3, generator=generator, dtype=torch.float64)
    vapour = torch.rand(n // 20, 3, generator=generator, dtype=torch.float64)
    points = torch.cat([dense, vapour])
    return points - torch.floor(points)


def test_regular_cuts_locate_like_the_regular_grid() -> None:
    grid = (3, 2, 5)
    home = torch.rand(500, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cells = torch.floor(home * torch.tensor(grid)).long()
    expected = (cells[:, 0] * grid[1] + cells[:, 1]) * grid[2] + cells[:, 2]
    assert torch.equal(StaggeredCuts.regular(grid).locate(home), expected)
    beyond = torch.tensor([[-0.5, 0.5, 1.5], [2.0, -1.0, 0.2]], dtype=torch.float64)
    assert StaggeredCuts.regular(grid).locate(beyond).tolist() == [
        (0 * 2 + 1) * 5 + 4,
        (2 * 2 + 0) * 5 + 1,
    ]


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 7, 8, 16])
def test_balanced_cuts_give_equal_shares(world_size: int) -> None:
    home = _blob(2000, world_size)
    weights = torch.ones(home.shape[0], dtype=torch.float64)
    regular = StaggeredCuts.regular((world_size, 1, 1)).locate(home)
    assert imbalance(torch.bincount(regular, minlength=world_size)) > 1.5
    cuts = balanced_cuts(home, weights, world_size, [30.0] * 3, [True] * 3, in_one_process)
    counts = torch.bincount(cuts.locate(home), minlength=world_size)
    assert int(counts.sum()) == home.shape[0]
    assert imbalance(counts) <= 1.05, counts.tolist()


def test_weights_are_balanced_not_counts() -> None:
    home = torch.rand(1000, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    weights = torch.where(home[:, 0] < 0.5, 3.0, 1.0).to(torch.float64)
    cuts = balanced_cuts(home, weights, 2, [30.0] * 3, [True] * 3, in_one_process, grid=(2, 1, 1))
    owner = cuts.locate(home)
    shares = torch.stack([weights[owner == r].sum() for r in range(2)])
    assert imbalance(shares) < 1.02
    assert abs(float(cuts.x[1]) - 1.0 / 3.0) < 0.03  # 3 x 0.5 x w on the left = the rest


def test_a_slab_in_vacuum_is_cut_only_across_its_plane() -> None:
    generator = torch.Generator().manual_seed(2)
    home = torch.rand(1600, 3, dtype=torch.float64, generator=generator)
    home[:, 2] = 0.1 + 0.3 * home[:, 2]  # 30 % of z occupied
    weights = torch.ones(home.shape[0], dtype=torch.float64)
    cuts = balanced_cuts(home, weights, 4, [20.0, 20.0, 50.0], [True, True, False], in_one_process)
    assert cuts.grid == (2, 2, 1)


def test_the_grid_keeps_ghost_rows_of_the_busiest_rank_small() -> None:
    """A thin slab (15 Å of 50, 30 x 26 Å periodic in-plane) with a 6 Å ghost shell: strips
    along x need ghosts on two faces and none along y (unsplit, wrapped), fewer rows than
    quarters (four faces) or a cut through the slab."""
    generator = torch.Generator().manual_seed(3)
    home = torch.rand(2000, 3, dtype=torch.float64, generator=generator)
    home[:, 2] = 0.3 * home[:, 2]
    weights = torch.ones(home.shape[0], dtype=torch.float64)
    widths, pbc = [30.0, 26.0, 50.0], [True, True, True]
    cuts = balanced_cuts(home, weights, 4, widths, pbc, in_one_process, halo_width=6.0)
    assert cuts.grid == (4, 1, 1)
    assert balanced_cuts(home, weights, 4, widths, pbc, in_one_process).grid == (2, 2, 1)


def test_cuts_do_not_depend_on_how_atoms_are_spread_over_ranks() -> None:
    home = _blob(900, 3)
    weights = torch.ones(home.shape[0], dtype=torch.float64)
    whole = balanced_cuts(home, weights, 6, [20.0, 25.0, 30.0], [True, False, True], in_one_process)

    def per_rank(comm) -> StaggeredCuts:
        mine = slice(comm.rank, None, comm.size)
        widths, pbc = [20.0, 25.0, 30.0], [True, False, True]
        return balanced_cuts(home[mine], weights[mine], 6, widths, pbc, comm.all_reduce)

    for cuts in run_simulated(3, per_rank):
        assert torch.equal(cuts.x, whole.x) and torch.equal(cuts.y, whole.y)
        assert torch.equal(cuts.z, whole.z)


def test_a_cut_in_a_gap_sits_mid_gap() -> None:
    home = torch.full((10, 3), 0.5, dtype=torch.float64)
    home[:5, 0], home[5:, 0] = 0.2, 0.6
    weights = torch.ones(10, dtype=torch.float64)
    cuts = balanced_cuts(home, weights, 2, [10.0] * 3, [True] * 3, in_one_process, grid=(2, 1, 1))
    assert abs(float(cuts.x[1]) - 0.4) < 2.0 / BINS
    assert cuts.y.tolist() == [[0.0, 1.0]] * 2  # one part: nothing to cut


def test_inconsistent_cuts_are_refused() -> None:
    good = StaggeredCuts.regular((2, 2, 1))
    with pytest.raises(ValueError, match="rise from <= 0 to >= 1"):
        bad_y = torch.tensor([[0.0, 0.5, 1.0], [0.0, 1.2, 1.0]], dtype=torch.float64)
        StaggeredCuts(good.x, bad_y, good.z).check()
    with pytest.raises(ValueError, match="inconsistent shapes"):
        StaggeredCuts(torch.tensor([0.0, 0.3, 0.6, 1.0]), good.y, good.z).check()


def test_atoms_beyond_an_open_face_are_split_too() -> None:
    """An open axis's frame is fixed at partition; atoms that left it (a cluster drifting
    out) are still cut into equal shares, the outer cuts following them."""
    generator = torch.Generator().manual_seed(4)
    home = torch.rand(800, 3, dtype=torch.float64, generator=generator)
    home[:, 0] = 1.2 + 0.6 * home[:, 0]  # all beyond the frame's upper x face
    home[:, 1] = 0.95 * home[:, 1]
    home[0, 1] = -0.007271038395492028  # below the lower y face: lo + (1 - lo) rounds below 1
    weights = torch.ones(home.shape[0], dtype=torch.float64)
    grid = (4, 2, 1)
    cuts = balanced_cuts(home, weights, 8, [20.0] * 3, [False] * 3, in_one_process, grid)
    assert imbalance(torch.bincount(cuts.locate(home), minlength=8)) < 1.05
    assert float(cuts.x[0]) == 0.0 and float(cuts.x[-1]) == float(home[:, 0].max())
    assert StaggeredCuts.regular(grid).locate(home).unique().tolist() == [6, 7]
