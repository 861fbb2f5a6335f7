"""What `rebalanced` balances: each rank's cost (owned atoms, rows, measured seconds)
spread over its owned atoms; and `row_counts`, the rows each rank's model evaluates."""

from __future__ import annotations

import torch

from nvdd_plugins import Batch, DomainConfig
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.decomposition import (
    DecompositionFrame,
    SpatialPartitioner,
    balanced_cuts,
    imbalance,
    in_one_process,
    owned_counts,
    rebalanced,
    row_counts,
)
from nvdd_plugins.distributed_model import ReplicatedModel
from tests.helpers.systems import lj_model, slab

HALO = 3.0


def _box_partitioner(n: int, grid: tuple[int, int, int]) -> tuple[SpatialPartitioner, torch.Tensor]:
    """Uniform random atoms in a periodic 20 Å cube and the regular grid `grid` over it."""
    generator = torch.Generator().manual_seed(n)
    positions = 20.0 * torch.rand(n, 3, dtype=torch.float64, generator=generator)
    cell = 20.0 * torch.eye(3, dtype=torch.float64)
    frame = DecompositionFrame.from_system(positions, cell, torch.tensor([True] * 3))
    world_size = grid[0] * grid[1] * grid[2]
    return SpatialPartitioner(frame, world_size, grid, HALO), positions


def test_owned_atoms_as_the_cost_weigh_every_atom_alike() -> None:
    partitioner, positions = _box_partitioner(2000, (2, 1, 1))
    positions[:, 0] = positions[:, 0] * 0.6  # most atoms on rank 0
    counts = owned_counts(partitioner, positions, in_one_process)
    cuts = rebalanced(partitioner, positions, counts, 1.05, in_one_process, (2, 1, 1))
    home, _ = partitioner.home_fractional(positions)
    ones = torch.ones(positions.shape[0], dtype=torch.float64)
    frame = partitioner.frame
    expected = balanced_cuts(
        home, ones, 2, frame.widths.tolist(), frame.pbc.tolist(), in_one_process, (2, 1, 1), HALO
    )
    assert cuts is not None and torch.equal(cuts.x, expected.x)


def test_a_rank_three_times_slower_per_atom_ends_with_a_quarter_of_the_atoms() -> None:
    """Rank 0 takes 3 times as long per atom. Its seconds spread over its atoms weigh them
    3, so the first re-balance gives it a third of the atoms (3 x 1/3 = 1 - 1/3); measured
    again at the next rebuilds, the cuts converge on a quarter (3 x 1/4 = 3/4), as with
    LAMMPS's `fix balance ... weight time`."""
    partitioner, positions = _box_partitioner(4000, (2, 1, 1))
    slowness = torch.tensor([3.0, 1.0], dtype=torch.float64)
    shares = []
    for _ in range(5):
        counts = owned_counts(partitioner, positions, in_one_process)
        seconds = counts * slowness
        cuts = rebalanced(partitioner, positions, seconds, 1.05, in_one_process, (2, 1, 1))
        if cuts is None:
            break
        partitioner = SpatialPartitioner(partitioner.frame, 2, None, HALO, cuts)
        shares.append(float(owned_counts(partitioner, positions, in_one_process)[0]) / 4000)
    assert abs(shares[0] - 1 / 3) < 0.02, shares
    assert abs(shares[-1] - 1 / 4) < 0.02, shares


def test_costs_within_the_threshold_keep_the_cuts() -> None:
    partitioner, positions = _box_partitioner(500, (2, 1, 1))
    costs = torch.tensor([1.04, 0.96], dtype=torch.float64)
    assert rebalanced(partitioner, positions, costs, 1.05, in_one_process) is None


def test_balancing_by_rows_evens_out_the_rows() -> None:
    """A 12 Å thick layer of random atoms in 28 Å of vacuum, on a forced 1 x 1 x 3 grid
    across it: equal owned atoms (4 Å slices) leave the middle slice with ghosts on both
    faces (rows 7 : 10 : 7), the outer ones on one; rows as the cost thin the middle slice
    until the rows are nearly equal (slices 5 : 2 : 5 Å, rows 8 : 8 : 8)."""
    _, positions = _box_partitioner(3000, (1, 1, 3))
    positions[:, 2] = 14.0 + positions[:, 2] * 12.0 / 20.0  # z from 14 to 26 Å
    cell = torch.diag(torch.tensor([20.0, 20.0, 40.0], dtype=torch.float64))
    frame = DecompositionFrame.from_system(positions, cell, torch.tensor([True] * 3))

    def balanced(counted) -> SpatialPartitioner:
        """Re-balanced from the regular grid, the cost counted by `counted`."""
        regular = SpatialPartitioner(frame, 3, (1, 1, 3), HALO)

        def cost_of(partitioner: SpatialPartitioner) -> torch.Tensor:
            return counted(partitioner, positions, in_one_process)

        costs = cost_of(regular)
        cuts = rebalanced(regular, positions, costs, 1.0, in_one_process, (1, 1, 3), cost_of)
        assert cuts is not None
        return SpatialPartitioner(frame, 3, None, HALO, cuts)

    by_atoms, by_rows = balanced(owned_counts), balanced(row_counts)
    assert imbalance(owned_counts(by_atoms, positions, in_one_process)) < 1.02
    assert imbalance(row_counts(by_atoms, positions, in_one_process)) > 1.2
    assert imbalance(row_counts(by_rows, positions, in_one_process)) < 1.06
    busiest = [float(row_counts(p, positions, in_one_process).max()) for p in (by_atoms, by_rows)]
    assert busiest[1] < 0.9 * busiest[0], busiest


def test_row_counts_are_the_rows_each_rank_evaluates() -> None:
    atoms = slab()
    model = lj_model()

    def per_rank(comm) -> tuple[int, torch.Tensor]:
        config = DomainConfig(model.cutoff, 0.3, comm, balance_weight="rows")
        replicated = ReplicatedModel(model, config)
        batch = Batch.from_atoms(atoms)
        replicated(batch)
        domain = replicated.domain
        rows = row_counts(domain.partitioner, batch.positions, in_one_process)
        return domain.view.n_local, rows

    for rank, (n_local, rows) in enumerate(run_simulated(3, per_rank)):
        assert n_local == int(rows[rank]), (rank, n_local, rows.tolist())
