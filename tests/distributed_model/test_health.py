"""A model that turns NaN mid-run stops every rank at that step, naming the atoms."""

from __future__ import annotations

import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, SimulatedMesh, run_simulated
from nvdd_plugins.distributed_model import NonFiniteError
from nvdd_plugins.dynamics import NVE
from tests.helpers.multiprocess import RankFailed, run_gloo
from tests.helpers.systems import NaNBeyondWall

WALL_X = 14.0  # Å: the model's energy is NaN for atoms beyond this


def _gas() -> Batch:
    """Four atoms; atom 2 flies along +x and passes the wall after ~20 steps of 5 fs."""
    positions = [[2.0, 2.0, 2.0], [2.0, 8.0, 8.0], [6.0, 5.0, 5.0], [2.0, 5.0, 14.0]]
    atoms = Atoms("Ar4", positions=positions, cell=[30.0, 20.0, 20.0], pbc=True)
    batch = Batch.from_atoms(atoms)
    velocities = torch.zeros(4, 3, dtype=batch.positions.dtype)
    velocities[2, 0] = 0.8  # Å per ASE time unit
    batch.add_node_property("velocities", velocities)
    return batch


def _run(comm: Communicator) -> int:
    model = NaNBeyondWall(WALL_X)
    config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm)
    with DomainParallel(NVE(model, 5.0, skin=0.3), config, n_steps=100) as dd:
        dd.partition(_gas() if comm.rank == 0 else None)
        dd.run()
    return dd.dynamics.step_count


def test_single_process_names_step_and_atom() -> None:
    with pytest.raises(NonFiniteError, match=r"step \d+: .*rank 0: atoms \[2\]"):
        _run(SimulatedMesh(1).communicator(0))


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_simulated_rank_stops_at_the_same_step(world_size: int) -> None:
    with pytest.raises(RuntimeError, match=r"NonFiniteError.*step \d+: .*atoms \[2\]"):
        run_simulated(world_size, _run, timeout=60)


def test_gloo_ranks_stop_with_the_message() -> None:
    with pytest.raises(RankFailed, match=r"NonFiniteError: step \d+: .*atoms \[2\]"):
        run_gloo(2, _run, timeout=60)
