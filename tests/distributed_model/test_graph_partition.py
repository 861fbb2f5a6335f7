"""Graph partition on the simulated mesh equals the single-process run (empty ranks too); its
view holds each atom at most once; a rank gathers no positions and hears only from the ranks
near it; without the per-layer refresh, or with the halo layout for a model that builds its
own graph, the results are wrong (negative controls)."""

from __future__ import annotations

import itertools

import pytest
import torch
from ase import Atoms
from ase.build import bulk

from nvdd_plugins import Batch, DistributedModel, DomainConfig, DomainParallel, ReplicatedModel
from nvdd_plugins.comm import SimulatedCommunicator, run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.distributed_model.evaluation.context import HaloContext
from nvdd_plugins.distributed_model.rows.graph_partition import GraphDomain, near_atoms
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.geometry import minimum_image
from nvdd_plugins.models import RadiusGraphMPNN
from nvdd_plugins.spec import SPEC_MPNN_GRAPH, SPEC_MPNN_HALO, for_strategy
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated
from tests.helpers.systems import (
    SPARSE_SYSTEMS,
    SYSTEMS,
    ShiftPairModel,
    hot_bulk,
    lj_model,
    md_integrator,
    mpnn_model,
    triclinic_bulk,
)

GRAPH = StrategyKind.GRAPH_PARTITION
MODELS = {
    "mpnn": mpnn_model,
    "radius_graph": lambda: RadiusGraphMPNN().double(),
    "lj": lj_model,
    "pair": ShiftPairModel,
}


def _worst(model, atoms, world_size: int, strategy=GRAPH) -> dict[str, float]:
    properties = properties_for(atoms)
    ref = reference(model, atoms, properties)
    results = run_simulated(
        world_size, lambda comm: replicated(comm, model, atoms, properties, strategy=strategy)
    )
    deviations = [errors(result, ref, len(atoms)) for result in results]
    return {key: max(d[key] for d in deviations) for key in deviations[0]}


@pytest.mark.parametrize("name", MODELS)
def test_matches_single_process(name: str) -> None:
    model = MODELS[name]()
    for system, build in SYSTEMS.items():
        for world_size in (1, 2, 3, 4):
            assert_close(_worst(model, build(), world_size), f"{name}/{system}/P{world_size}")


@pytest.mark.parametrize("name", ["mpnn", "radius_graph"])
def test_ranks_owning_nothing(name: str) -> None:
    """Fewer atoms than ranks, or atoms in one corner: some ranks own nothing or have no
    near ranks."""
    model = MODELS[name]()
    for system in ("single_atom", "corner"):
        for world_size in (2, 4):
            atoms = SPARSE_SYSTEMS[system]()
            assert_close(_worst(model, atoms, world_size), f"{name}/{system}/P{world_size}")


def test_a_rank_gathers_no_positions_and_hears_only_near_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 8 ranks each rank of a 4000-atom crystal hears of fewer than a quarter of the atoms
    (its eighth's shell); what every rank gathers from all is its bins' runs (integers, a
    few per rank); and ranks holding far-apart clusters exchange no atoms at all."""
    gathered: list[torch.Tensor] = []
    original = SimulatedCommunicator.all_gather
    monkeypatch.setattr(
        SimulatedCommunicator,
        "all_gather",
        lambda self, tensor: gathered.append(tensor) or original(self, tensor),
    )
    crystal = bulk("Ar", "fcc", a=5.26, cubic=True) * (10, 10, 10)
    crystal.rattle(0.1, seed=0)
    crystal.positions += 1.3  # no lattice plane on the eighths' faces
    full, width = Batch.from_atoms(crystal), 4.8
    n = full.num_nodes

    rows = run_simulated(8, lambda comm: _owned_and_near(comm, full, width))
    assert all(owned == n // 8 for owned, _ in rows)
    assert max(near for _, near in rows) < n / 4, rows
    assert not any(t.is_floating_point() for t in gathered), "positions were all-gathered"
    assert max(t.shape[0] for t in gathered) < n / 20

    corners = torch.tensor(list(itertools.product((0.0, 40.0), repeat=3)), dtype=torch.float64)
    offsets = torch.rand(8, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    positions = (corners[:, None] + offsets * 3.0).reshape(-1, 3)  # 8 clusters of 8 atoms
    clusters = Batch.from_atoms(Atoms(f"Ar{len(positions)}", positions.numpy(), pbc=False))
    heard = run_simulated(4, lambda comm: _owned_and_near(comm, clusters, width))
    assert heard == [(16, 0)] * 4


def _owned_and_near(comm, full: Batch, width: float) -> tuple[int, int]:
    """This rank's owned atoms of `full` under graph partition and the atoms of other ranks
    it hears of (within `width`, give or take a bin)."""
    domain = GraphDomain(comm, DomainConfig(4.5, 0.3, comm, strategy=GRAPH))
    domain.setup(full if comm.rank == 0 else None)
    ids = domain.select_owned(full.positions, full.cell[0])
    owned = full.select_nodes(ids)
    owned.add_node_property("global_ids", ids)
    return owned.num_nodes, near_atoms(comm, owned, width).positions.shape[0]


def test_without_ghost_refresh_it_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: the owners' rows must replace ghost rows after every layer."""
    monkeypatch.setattr(HaloContext, "refresh", lambda self, tensor: tensor)
    monkeypatch.setattr(HaloContext, "refresh_", lambda self, tensor: tensor)
    worst = _worst(RadiusGraphMPNN().double(), triclinic_bulk(), 2)
    assert worst["energies"] > 1e-6, worst


class _HaloRadiusGraph(RadiusGraphMPNN):
    """The self-graph model claiming the halo layout (wrongly)."""

    def distribution_spec(self, strategy=None):
        return for_strategy(SPEC_MPNN_GRAPH, strategy)


def test_self_graph_model_needs_graph_partition() -> None:
    """Negative control: under the halo layout a periodic self-image ghost adds pairs the
    model finds again by minimum image; the model itself declares no halo spec."""
    small_box = SYSTEMS["small_box"]()
    assert _worst(_HaloRadiusGraph().double(), small_box, 1, StrategyKind.HALO)["energy"] > 1e-6
    assert _worst(_HaloRadiusGraph().double(), small_box, 1)["energy"] < 1e-12
    config = DomainConfig(cutoff=4.5, strategy=StrategyKind.HALO)
    with pytest.raises(DistributionRuleError, match="returned None"):
        DistributedModel(RadiusGraphMPNN(), config)


def test_spec_policy_must_match_the_strategy() -> None:
    model = ShiftPairModel()
    model.distribution_spec = lambda strategy=None: SPEC_MPNN_HALO
    with pytest.raises(DistributionRuleError, match="needs a GraphParallelPolicy spec"):
        DistributedModel(model, DomainConfig(5.0, strategy=GRAPH))


def test_view_holds_each_atom_once_and_exactly_the_neighbours() -> None:
    atoms = triclinic_bulk()
    model = mpnn_model()
    width = model.cutoff + 0.3
    batch = Batch.from_atoms(atoms)
    vectors = minimum_image(
        (batch.positions[None] - batch.positions[:, None]).reshape(-1, 3),
        batch.cell[0],
        batch.pbc[0],
    )
    close = vectors.norm(dim=-1).reshape(len(atoms), len(atoms)) < width

    def layout(comm):
        distributed = ReplicatedModel(model, DomainConfig(model.cutoff, 0.3, comm, strategy=GRAPH))
        distributed(batch, ("energy",))
        view = distributed.domain.view
        return view.global_ids, view.n_owned, view.edge_index

    for world_size in (2, 4):
        owned_ids = []
        for ids, n_owned, edge_index in run_simulated(world_size, lambda c: layout(c)):
            assert len(ids) == len(set(ids.tolist())), "an atom appears twice in a view"
            owned = ids[:n_owned]
            neighbours = torch.nonzero(close[owned].any(dim=0)).flatten()
            expected = set(neighbours.tolist()) - set(owned.tolist())
            assert set(ids[n_owned:].tolist()) == expected
            filled = edge_index[0] < len(ids)
            assert bool(((edge_index[:, filled] < n_owned).any(dim=0)).all())
            owned_ids.append(owned)
        counts = [len(o) for o in owned_ids]
        assert max(counts) - min(counts) <= 1
        assert sorted(torch.cat(owned_ids).tolist()) == list(range(len(atoms)))


@pytest.mark.parametrize("name", ["mpnn", "radius_graph"])
def test_trajectory_without_migration(name: str) -> None:
    """30 NVE steps with several rebuilds: positions on the single-process trajectory, and
    every rank keeps the atoms it was given."""
    model = MODELS[name]()
    full = hot_bulk()
    dynamics, batch = md_integrator("nve", model), full.copy()
    for _ in range(30):
        dynamics.step(batch)

    def per_rank(comm):
        config = DomainConfig(model.cutoff, 0.5, comm, strategy=GRAPH)
        with DomainParallel(md_integrator("nve", model), config, 30) as dd:
            first = dd.partition(full.copy() if comm.rank == 0 else None).global_ids.clone()
            dd.run()
            gathered = dd.gather(dd.batch).positions.detach()
            return gathered, first, dd.batch.global_ids, dd.model.domain.rebuilds

    for gathered, first, last, rebuilds in run_simulated(3, per_rank):
        assert float((gathered - batch.positions).abs().max()) < 1e-8
        assert torch.equal(first, last)
        assert rebuilds > 1


def test_unsupported_options_are_refused() -> None:
    with pytest.raises(ValueError, match="compile"):
        DistributedModel(mpnn_model(), DomainConfig(4.5, 0.5, compile=True, strategy=GRAPH))
    distributed = DistributedModel(mpnn_model(), DomainConfig(4.5, 0.5, strategy=GRAPH))
    with pytest.raises(NotImplementedError, match="checkpoints"):
        distributed.domain.checkpoint_state()
