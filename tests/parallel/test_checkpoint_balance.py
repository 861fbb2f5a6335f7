"""Checkpoints record the balanced cuts: a restart at the same rank count keeps them, one at
another rank count balances afresh."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from ase.md.velocitydistribution import thermalize_momenta

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, run_simulated
from nvdd_plugins.decomposition import imbalance
from tests.helpers.systems import MD_SKIN, lj_model, md_integrator, slab


def _hot_slab() -> Batch:
    atoms = slab()
    thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(3))
    return Batch.from_atoms(atoms)


def _parallel(comm: Communicator, grid: tuple[int, int, int] | None) -> DomainParallel:
    config = DomainConfig(cutoff=lj_model().cutoff, skin=MD_SKIN, mesh=comm, grid=grid)
    return DomainParallel(md_integrator("nve", lj_model()), config, 10)


def _counts(comm: Communicator, dd: DomainParallel) -> torch.Tensor:
    mine = torch.zeros(comm.size, dtype=torch.float64)
    mine[comm.rank] = dd.batch.num_nodes
    return comm.all_reduce(mine, "sum")


def test_cuts_survive_a_restart_and_are_balanced_afresh_at_another_rank_count(
    tmp_path: Path,
) -> None:
    path = tmp_path / "slab.pt"

    def first(comm: Communicator) -> tuple:
        dd = _parallel(comm, (1, 1, 4))  # z cuts across the vacuum: regular is unbalanced
        dd.partition(_hot_slab() if comm.rank == 0 else None)
        dd.run()
        dd.save_checkpoint(path)
        cuts = dd.model.domain.partitioner.cuts
        return cuts.z.clone(), dd.model.domain.rebalances, imbalance(_counts(comm, dd))

    saved_z, rebalances, before = run_simulated(4, first)[0]
    assert rebalances >= 1 and before <= 1.05
    assert not torch.equal(saved_z, torch.linspace(0, 1, 5, dtype=torch.float64).reshape(1, 1, 5))

    def second(comm: Communicator) -> tuple:
        dd = _parallel(comm, None)
        dd.restore_checkpoint(path)
        domain = dd.model.domain
        return domain.partitioner.cuts.z.clone(), domain.rebalances, imbalance(_counts(comm, dd))

    same_z, same_rebalances, same = run_simulated(4, second)[0]
    assert torch.equal(same_z, saved_z) and same_rebalances == 0 and same == before
    _, other_rebalances, other = run_simulated(3, second)[0]
    assert other_rebalances == 1 and other <= 1.05
