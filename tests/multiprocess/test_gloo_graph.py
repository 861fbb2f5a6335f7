"""Graph partition across real gloo ranks (2, 3, 4) equals the single-process run for the
MPNN, a tiny MACE and a model that builds its own radius graph: DistributedModel with every
rank holding the system, the ASE calculator (a second evaluation without a rebuild: the
spec's shortcuts) and a DomainParallel NVE run."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from ase import Atoms

from nvdd_plugins import DomainConfig, DomainParallel
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import Communicator
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import RadiusGraphMPNN
from tests.helpers.multiprocess import run_gloo
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated
from tests.helpers.systems import SYSTEMS, corner_cluster, hot_bulk, md_integrator, mpnn_model

pytestmark = pytest.mark.multiprocess

GRAPH = StrategyKind.GRAPH_PARTITION
STEPS = 20
MACE_AVAILABLE = importlib.util.find_spec("mace") is not None


def _cases() -> list[tuple[str, torch.nn.Module, Atoms]]:
    cases = []
    for name, model in (("mpnn", mpnn_model()), ("radius_graph", RadiusGraphMPNN().double())):
        cases += [(name, model, SYSTEMS[system]()) for system in ("bulk", "slab")]
    cases.append(("mpnn", mpnn_model(), corner_cluster()))  # ranks with no near ranks
    if MACE_AVAILABLE:
        from nvdd_plugins.models import MACEWrapper
        from tests.helpers.mace_models import tiny_mace, with_two_species

        cases.append(("mace", MACEWrapper(tiny_mace()), with_two_species(SYSTEMS["bulk"]())))
    return cases


def _states(atoms: Atoms) -> list[Atoms]:
    """The system, then moved below skin / 2: the second evaluation reuses the view (no
    checked forward; MACE then takes its spec's shortcuts)."""
    moved = atoms.copy()
    moved.positions += np.random.default_rng(0).uniform(-0.05, 0.05, moved.positions.shape)
    return [atoms, moved]


def _ase(comm: Communicator, model: torch.nn.Module, states: list[Atoms]) -> list[dict]:
    calc = DomainDecomposedCalculator(model, skin=0.3, comm=comm, strategy=GRAPH)
    results = []
    for state in states:
        mine = state.copy()
        mine.calc = calc
        results.append(
            {
                "energy": torch.tensor([mine.get_potential_energy()], dtype=torch.float64),
                "energies": torch.tensor(mine.get_potential_energies()),
                "forces": torch.tensor(mine.get_forces()),
            }
        )
    return results


def _trajectory(comm: Communicator, model: torch.nn.Module) -> torch.Tensor:
    config = DomainConfig(model.cutoff, 0.5, comm, strategy=GRAPH)
    with DomainParallel(md_integrator("nve", model), config, STEPS) as dd:
        dd.partition(hot_bulk() if comm.rank == 0 else None)
        dd.run()
        return dd.gather(dd.batch).positions.detach()


def _label(name: str, atoms: Atoms) -> str:
    return f"{name}/{atoms.get_chemical_formula()}"


def _per_rank(comm: Communicator, cases, ase_cases, trajectory_models) -> dict:
    report = {}
    for name, model, atoms in cases:
        result = replicated(comm, model, atoms, properties_for(atoms), strategy=GRAPH)
        report[_label(name, atoms)] = result
    for name, model, states in ase_cases:
        for k, result in enumerate(_ase(comm, model, states)):
            report[f"ase/{name}/{k}"] = result
    report["positions"] = [_trajectory(comm, model) for model in trajectory_models]
    return report


def _reference_positions(model: torch.nn.Module) -> torch.Tensor:
    dynamics, batch = md_integrator("nve", model), hot_bulk()
    for _ in range(STEPS):
        dynamics.step(batch)
    return batch.positions.detach()


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_graph_partition_on_gloo_ranks(world_size: int) -> None:
    cases = _cases()
    refs = {
        _label(name, atoms): (reference(model, atoms, properties_for(atoms)), len(atoms))
        for name, model, atoms in cases
    }
    bulk_cases = [(n, m, a) for n, m, a in cases if a.pbc.all()]  # not the slabs
    ase_cases = [(n, m, _states(a)) for n, m, a in bulk_cases if n in ("radius_graph", "mace")]
    for name, model, states in ase_cases:
        for k, state in enumerate(states):
            refs[f"ase/{name}/{k}"] = (reference(model, state, ("energy", "forces")), len(state))
    models = {name: model for name, model, _ in cases}
    trajectory_models = [models["mpnn"], models["radius_graph"]]
    positions = [_reference_positions(model) for model in trajectory_models]
    reports = run_gloo(world_size, _per_rank, cases, ase_cases, trajectory_models, timeout=300)
    for rank, report in enumerate(reports):
        for label, (ref, n_atoms) in refs.items():
            assert_close(errors(report[label], ref, n_atoms), f"rank {rank} P{world_size} {label}")
        for ref, result in zip(positions, report["positions"], strict=True):
            assert float((result - ref).abs().max()) < 1e-8, f"rank {rank} P{world_size}"
