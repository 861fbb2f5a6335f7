"""Property-based: for random cells (skewed triclinic included), pbc, positions, velocities
and world sizes 1-8, after every step of a hot-gas run with migrations: every atom is owned
exactly once, each rank's ghost shell holds every pair within the cutoff of its owned atoms,
and atom count, mass and momentum are conserved."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase import Atoms
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from nvdd_plugins import Batch, DomainConfig, DomainParallel, HookScope
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import NVE, DynamicsStage
from nvdd_plugins.geometry import build_neighbor_list
from nvdd_plugins.models import BaseModelMixin, ModelConfig, NeighborConfig
from nvdd_plugins.spec import SPEC_MPNN_HALO
from tests.conftest import all_tests

CUTOFF = 3.0


class SoftSpheres(nn.Module, BaseModelMixin):
    """Bounded pair repulsion 0.05 (1 - r/rc)^2 eV: a hot gas stays finite at any overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.model_config = ModelConfig(
            autograd_outputs=frozenset({"forces"}),
            autograd_inputs=frozenset({"positions"}),
            neighbor_config=NeighborConfig(cutoff=CUTOFF),
        )

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs = self.adapt_input(batch)
        i, j = inputs.edge_index
        r = (inputs.positions[j] - inputs.positions[i] + inputs.shifts).norm(dim=-1)
        pair = 0.05 * (1.0 - r / CUTOFF).clamp(min=0.0) ** 2
        energies = inputs.positions.new_zeros(inputs.positions.shape[0]).index_add(0, i, pair)
        energy = energies.new_zeros(inputs.num_graphs).index_add(0, inputs.batch_idx, energies)
        return {"energies": energies, "energy": energy}

    def distribution_spec(self, strategy=None):
        return SPEC_MPNN_HALO


@st.composite
def gases(draw) -> tuple[Atoms, np.ndarray, int]:
    """A random hot gas: cell, pbc, positions, velocities, and a world size."""
    lengths = draw(st.lists(st.floats(7.0, 16.0), min_size=3, max_size=3))
    tilts = draw(st.lists(st.floats(-0.6, 0.6), min_size=3, max_size=3))
    cell = np.diag(lengths)
    cell[1, 0], cell[2, 0], cell[2, 1] = tilts[0] * lengths[0], tilts[1] * lengths[0], tilts[2]
    pbc = draw(st.tuples(st.booleans(), st.booleans(), st.booleans()))
    n_atoms = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    fractional = rng.uniform(-0.05, 1.05, (n_atoms, 3))  # some atoms just outside the cell
    atoms = Atoms(["Ar"] * n_atoms, scaled_positions=fractional, cell=cell, pbc=pbc)
    velocities = rng.normal(scale=0.3, size=(n_atoms, 3))  # Å per ASE time unit: hot
    return atoms, velocities, draw(st.integers(1, 8))


def _pairs(ids: torch.Tensor, edge_index: torch.Tensor, distance: torch.Tensor) -> list:
    """Sorted (id_i, id_j, distance to 1e-9 Å) of pairs closer than the cutoff."""
    keep = distance < CUTOFF
    i, j = ids[edge_index[0][keep]], ids[edge_index[1][keep]]
    rounded = torch.round(distance[keep] * 1e9).long()
    return sorted(zip(i.tolist(), j.tolist(), rounded.tolist(), strict=True))


class _Invariants:
    """GLOBAL AFTER_STEP hook: ownership, ghost-shell completeness and conservation."""

    stage = DynamicsStage.AFTER_STEP
    scope = HookScope.GLOBAL
    frequency = 1

    def __init__(self, dd: DomainParallel, n_atoms: int, mass: float, momentum: torch.Tensor):
        self.dd, self.n_atoms, self.mass, self.momentum = dd, n_atoms, mass, momentum
        self.steps = 0

    def __call__(self, ctx, stage) -> None:
        full = ctx.batch
        assert torch.equal(full.global_ids, torch.arange(self.n_atoms)), "owned twice or lost"
        assert abs(float(full.atomic_masses.sum()) - self.mass) < 1e-9
        momentum = (full.atomic_masses[:, None] * full.velocities).sum(0)
        assert torch.allclose(momentum, self.momentum, atol=1e-9), (momentum, self.momentum)
        self._check_ghost_shell(full)
        self.steps += 1

    def _check_ghost_shell(self, full: Batch) -> None:
        owned, model, comm = self.dd.batch, self.dd.model, self.dd.comm
        view = model.domain.view
        rows = view.positions(owned.positions, owned.cell[0], comm)
        from_owned = view.edge_index[0] < view.n_owned
        edges = view.edge_index[:, from_owned]
        vectors = rows[edges[1]] - rows[edges[0]] + view.edge_shifts(owned.cell[0])[from_owned]
        local = _pairs(view.global_ids, edges, vectors.norm(dim=-1))
        listed = build_neighbor_list(full.positions, full.cell[0], full.pbc[0], CUTOFF)
        mine = torch.isin(listed.edge_index[0], owned.global_ids)
        i, j = listed.edge_index[:, mine]
        distance = (full.positions[j] - full.positions[i] + listed.shifts[mine]).norm(dim=-1)
        expected = _pairs(full.global_ids, torch.stack([i, j]), distance)
        assert local == expected, "the ghost shell misses pairs (or has extra ones)"


def _run(
    comm, atoms: Atoms, velocities: np.ndarray, n_steps: int, every: int = 1
) -> tuple[int, int]:
    batch = Batch.from_atoms(atoms)
    batch.add_node_property("velocities", torch.tensor(velocities))
    mass = float(batch.atomic_masses.sum())
    momentum = (batch.atomic_masses[:, None] * batch.velocities).sum(0)
    config = DomainConfig(cutoff=CUTOFF, skin=0.4, mesh=comm)
    dd = DomainParallel(NVE(SoftSpheres(), 4.0), config, n_steps)
    check = _Invariants(dd, len(atoms), mass, momentum)
    dd.attach(check, interval=every)
    dd.partition(batch if comm.rank == 0 else None)
    dd.run()
    return check.steps, dd.model.domain.migrated


# CI draws 10 gases a run (a fresh random sample each time), test-all 40
@settings(
    max_examples=40 if all_tests() else 10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(gases())
def test_invariants_hold_every_step(gas: tuple[Atoms, np.ndarray, int]) -> None:
    atoms, velocities, world_size = gas
    n_steps = 12
    reports = run_simulated(world_size, lambda comm: _run(comm, atoms, velocities, n_steps), 60)
    assert all(steps == n_steps for steps, _ in reports)


def long_hot_gas(n_steps: int, world_size: int = 4, every: int = 50) -> tuple[int, int]:
    """A long hot-gas run with the invariants checked every `every` steps: (checks passed
    on each rank, atoms migrated in all). `benchmarks/long_run.py` runs 10^4 steps."""
    rng = np.random.default_rng(7)
    cell = [[14.0, 0.0, 0.0], [5.0, 13.0, 0.0], [-3.0, 2.0, 15.0]]
    atoms = Atoms(["Ar"] * 40, scaled_positions=rng.uniform(0, 1, (40, 3)), cell=cell, pbc=True)
    velocities = rng.normal(scale=0.4, size=(40, 3))
    reports = run_simulated(
        world_size, lambda comm: _run(comm, atoms, velocities, n_steps, every), 3600
    )
    assert len({steps for steps, _ in reports}) == 1
    return reports[0][0], sum(migrated for _, migrated in reports)


@pytest.mark.parametrize("n_steps", [200, pytest.param(1000, marks=pytest.mark.slow)])
def test_long_hot_gas_run_at_four_ranks(n_steps: int) -> None:
    checks, migrated = long_hot_gas(n_steps)
    assert checks == n_steps // 50
    assert migrated > n_steps // 5
