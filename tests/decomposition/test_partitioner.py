"""Ownership and ghost coverage of the spatial partitioner (brute-force checks)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from nvdd_plugins.decomposition import (
    DecompositionFrame,
    SpatialPartitioner,
    balanced_cuts,
    choose_rank_grid,
    in_one_process,
)
from tests.helpers.systems import SYSTEMS


def _partitioner(atoms, world_size, grid=None, width=0.0, balanced=False):
    positions = torch.tensor(atoms.positions)
    frame = DecompositionFrame.from_system(
        positions, torch.tensor(atoms.cell.array), torch.tensor(atoms.pbc)
    )
    regular = SpatialPartitioner(frame, world_size, grid, width)
    if not balanced:
        return regular, positions
    home, _ = regular.home_fractional(positions)
    weights = torch.ones(len(atoms), dtype=torch.float64)
    widths, pbc = frame.widths.tolist(), frame.pbc.tolist()
    cuts = balanced_cuts(home, weights, world_size, widths, pbc, in_one_process, grid)
    return SpatialPartitioner(frame, world_size, None, width, cuts), positions


def test_grid_minimises_surface() -> None:
    assert choose_rank_grid(8, [10, 10, 10]) == (2, 2, 2)
    assert choose_rank_grid(4, [40, 10, 10]) == (4, 1, 1)
    assert choose_rank_grid(6, [30, 20, 10]) == (3, 2, 1)
    assert choose_rank_grid(1, [1, 2, 3]) == (1, 1, 1)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_every_atom_has_exactly_one_owner(system, world_size) -> None:
    atoms = SYSTEMS[system]()
    atoms.positions += 3.0  # some atoms leave the cell: wrapping / open faces
    partitioner, positions = _partitioner(atoms, world_size)
    owners = partitioner.rank_of(positions)
    assert owners.shape == (len(atoms),)
    assert int(owners.min()) >= 0 and int(owners.max()) < world_size


@pytest.mark.parametrize(
    ("world_size", "balanced"), [(1, False), (2, False), (4, False), (3, True), (4, True)]
)
@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_ghosts_cover_every_neighbour_of_every_owned_atom(system, world_size, balanced) -> None:
    atoms = SYSTEMS[system]()
    width = 5.0
    partitioner, positions = _partitioner(atoms, world_size, width=width, balanced=balanced)
    partitioner.wrapped_axes[:] = False  # every periodic neighbour must come as a ghost here
    owners = partitioner.rank_of(positions)
    cell = torch.tensor(atoms.cell.array)
    pbc = atoms.pbc
    ranges = [range(-2, 3) if p else range(1) for p in pbc]
    images = torch.tensor(list(itertools.product(*ranges)), dtype=torch.float64) @ cell
    for rank in range(world_size):
        local = []
        for sender in range(world_size):
            rows = torch.nonzero(owners == sender).flatten()
            ghosts = partitioner.ghost_images(positions[rows], sender)
            keep = ghosts.ranks == rank
            local.append(positions[rows[ghosts.rows[keep]]] + ghosts.units[keep].double() @ cell)
        _, wrap = partitioner.home_fractional(positions)
        owned = torch.nonzero(owners == rank).flatten()
        home = positions[owned] - wrap[owned].double() @ cell
        present = torch.cat([home, *local])
        everything = (positions.unsqueeze(0) + images.unsqueeze(1)).reshape(-1, 3)
        for x in home:
            near = everything[(everything - x).norm(dim=1) < width - 1e-9]
            exact = "donot_use_mm_for_euclid_dist"
            distance = torch.cdist(near, present, compute_mode=exact).min(dim=1).values
            assert float(distance.max()) < 1e-9, f"rank {rank} misses a neighbour"


def test_open_cluster_frame_spans_the_atoms() -> None:
    atoms = SYSTEMS["cluster"]()
    partitioner, positions = _partitioner(atoms, 4)
    counts = np.bincount(partitioner.rank_of(positions).numpy(), minlength=4)
    assert counts.sum() == len(atoms) and (counts > 0).all()
