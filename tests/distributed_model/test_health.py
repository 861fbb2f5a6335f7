"""A model that turns NaN mid-run stops every rank at that step, naming the atoms."""

from __future__ import annotations

import re

import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, SimulatedMesh, run_simulated
from nvdd_plugins.distributed_model import NonFiniteError
from nvdd_plugins.distributed_model.evaluation.health import non_finite_report
from nvdd_plugins.dynamics import NVE
from tests.helpers.multiprocess import run_gloo
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


def _run(comm: Communicator) -> tuple[str, bool]:
    """Run until the NaN stops it: this rank's message, and whether it owns atom 2 then."""
    model = NaNBeyondWall(WALL_X)
    config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm)
    with DomainParallel(NVE(model, 5.0, skin=0.3), config, n_steps=100) as dd:
        owned = dd.partition(_gas() if comm.rank == 0 else None)
        with pytest.raises(NonFiniteError) as raised:
            dd.run()
    return str(raised.value), bool((owned.global_ids == 2).any())


def _check(results: list[tuple[str, bool]]) -> None:
    """Every rank raised the same message, naming atom 2 on the rank that owns it."""
    messages = {message for message, _ in results}
    assert len(messages) == 1, messages
    owners = [rank for rank, (_, owns) in enumerate(results) if owns]
    assert len(owners) == 1, owners
    pattern = rf"step \d+: non-finite energies on rank {owners[0]}: atoms \[2\]\. "
    assert re.match(pattern, messages.pop())


def test_single_process_names_step_and_atom() -> None:
    _check([_run(SimulatedMesh(1).communicator(0))])


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_simulated_rank_stops_at_the_same_step(world_size: int) -> None:
    _check(run_simulated(world_size, _run, timeout=60))


def test_gloo_ranks_stop_with_the_message() -> None:
    _check(run_gloo(2, _run))


def test_the_report_names_origins_first_and_shows_ten_ids_per_rank() -> None:
    """Kinds: 1 energy, 2 force, 4 position. An atom is listed once, under the first of
    energies, forces only, positions only; a rank that found nothing is left out."""
    found = [
        torch.tensor([[7, 2], [3, 6]]),
        torch.tensor([[i, 3] for i in range(12, 0, -1)]),
        torch.zeros(0, 2, dtype=torch.long),
        torch.tensor([[9, 4], [8, 1]]),
    ]
    assert non_finite_report(found, "atom ids").startswith(
        "non-finite energies on rank 1: atom ids [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] and 2 more; "
        "rank 3: atom ids [8] — non-finite forces only on rank 0: atom ids [3, 7] — "
        "non-finite positions only on rank 3: atom ids [9]. "
    )
    nothing = [torch.zeros(0, 2, dtype=torch.long)]
    assert non_finite_report(nothing).startswith("non-finite total energy")
