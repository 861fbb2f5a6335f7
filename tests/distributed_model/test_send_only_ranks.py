"""A rank that owns atoms its peers need as ghosts, but needs no ghosts itself, must still
take part in every halo exchange (it used to skip them and its peers waited forever)."""

from __future__ import annotations

import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import Communicator, SimulatedMesh, run_simulated
from nvdd_plugins.dynamics import NVE
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated
from tests.helpers.systems import SPARSE_SYSTEMS, lj_model, mpnn_model, single_atom

MODELS = {"lj": lj_model, "mpnn": mpnn_model}


@pytest.mark.parametrize("balance", ["off", "auto"])  # off: the corner's rank sends only
@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("system", sorted(SPARSE_SYSTEMS))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_replicated_evaluation(model_name: str, system: str, world_size: int, balance: str) -> None:
    model, atoms = MODELS[model_name](), SPARSE_SYSTEMS[system]()
    properties = properties_for(atoms)
    ref = reference(model, atoms, properties)
    results = run_simulated(
        world_size,
        lambda comm: replicated(comm, model, atoms, properties, balance=balance),
        timeout=30,
    )
    for result in results:
        label = f"{model_name}/{system}/{world_size}/{balance}"
        assert_close(errors(result, ref, len(atoms)), label)


def _drifting_dimer() -> Batch:
    """A dimer in a periodic box moving along x into the sub-domains of other ranks."""
    atoms = Atoms("Ar2", positions=[[2.0, 5.0, 5.0], [5.6, 5.0, 5.0]], cell=[24.0, 10.0, 10.0])
    atoms.pbc = True
    batch = Batch.from_atoms(atoms)
    batch.add_node_property("velocities", torch.tensor([[0.35, 0.0, 0.0]] * 2))
    return batch


def _dimer_run(comm: Communicator, n_steps: int) -> torch.Tensor:
    model = mpnn_model()
    frames = []
    config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm, grid=(comm.size, 1, 1))
    with DomainParallel(NVE(model, 5.0, skin=0.3), config) as dd:
        dd.partition(_drifting_dimer() if comm.rank == 0 else None)
        for _ in range(n_steps):
            dd.step()
            frames.append(dd.gather(dd.batch).positions)
    return torch.stack(frames)


def test_dimer_drifting_into_empty_sub_domains_on_real_ranks() -> None:
    n_steps = 80
    one = _dimer_run(SimulatedMesh(1).communicator(0), n_steps)
    assert float(one[-1, 0, 0] - one[0, 0, 0]) > 12.0, "the dimer must cross sub-domains"
    for frames in run_gloo(3, _dimer_run, n_steps, timeout=120):
        assert float((frames - one).abs().max()) < 1e-8


def _single_atom_replicated(comm: Communicator) -> dict[str, torch.Tensor]:
    atoms = single_atom()
    return replicated(comm, mpnn_model(), atoms, properties_for(atoms))


def test_single_atom_on_real_ranks() -> None:
    atoms = single_atom()
    ref = reference(mpnn_model(), atoms, properties_for(atoms))
    for result in run_gloo(2, _single_atom_replicated, timeout=60):
        assert_close(errors(result, ref, 1), "single atom, 2 gloo ranks")
