"""`GivenRowsModel` (the LAMMPS layout): ghost-row forces summed into owners and the virial
sum(x * f) over all local rows equal the single-process forces and stress."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch, DistributedModel, DomainConfig
from nvdd_plugins.comm import run_simulated, sum_ghosts_into_owners
from nvdd_plugins.distributed_model import GivenRows, GivenRowsModel
from tests.helpers.oracle import FORCES_TOL, STRESS_TOL, reference
from tests.helpers.systems import SYSTEMS, ShiftPairModel, lj_model, mpnn_model

MODELS = {"lj": lj_model, "mpnn": mpnn_model, "pair": lambda: ShiftPairModel(5.0)}


def _lammps_like(comm, model, atoms):
    """Lay out owned + ghost rows the way LAMMPS does, then evaluate them by global id."""
    full = Batch.from_atoms(atoms)
    config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm)
    config.grid = None
    distributed = DistributedModel(model, config)
    distributed.setup(full)
    distributed.domain.partitioner.wrapped_axes[:] = False  # LAMMPS has explicit ghosts only
    ids = distributed.domain.select_owned(full.positions, full.cell[0])
    owned = full.select_nodes(ids)
    owned.add_node_property("global_ids", ids)
    built = distributed.domain.build(owned)
    positions = built.positions(owned.positions, owned.cell[0], comm)[: built.n_local]
    global_ids = built.global_ids[: built.n_local]
    pairs = built.edge_index[:, built.edge_index[0] < built.n_rows]
    layout = GivenRowsModel(model, comm, padding_species=18)
    numbers = built.atomic_numbers[: built.n_local]
    result = layout(GivenRows(built.n_owned, positions, numbers, global_ids, owned.cell, pairs))
    view = layout.domain.view
    rows_forces = result["forces"]
    virial = comm.all_reduce((positions.unsqueeze(-1) * rows_forces.unsqueeze(-2)).sum(0))
    padded = torch.cat([rows_forces, rows_forces.new_zeros(view.n_rows - view.n_local, 3)])
    owner_forces = sum_ghosts_into_owners(padded, view.slot(comm))[: view.n_owned]
    return ids, owner_forces, virial, comm.all_reduce(result["energy"], "sum")


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_ghost_rows_carry_what_owners_need(model_name: str, world_size: int) -> None:
    model, atoms = MODELS[model_name](), SYSTEMS["bulk"]()
    ref = reference(model, atoms, ("energy", "forces", "stress"))
    results = run_simulated(world_size, lambda comm: _lammps_like(comm, model, atoms))
    forces = torch.zeros_like(ref["forces"])
    for ids, owner_forces, virial, energy in results:
        forces[ids] = owner_forces
        assert abs(float(energy[0] - ref["energy"][0])) < 1e-10 * len(atoms)
        stress = -virial / atoms.get_volume()
        assert float((stress - ref["stress"][0]).abs().max()) < STRESS_TOL
    assert float((forces - ref["forces"]).abs().max()) < FORCES_TOL


def _listed_steps(comm, model, atoms, moves):
    """The LAMMPS layout with the pairs listed by `GivenRowsModel` (no pairs given), at the
    positions of `atoms` moved by each of `moves` (owned rows move, ghosts follow their
    owners): per move, whether the view of the previous call was kept, and the owners'
    forces and energy."""
    full = Batch.from_atoms(atoms)
    config = DomainConfig(cutoff=model.cutoff, skin=0.6, mesh=comm)
    distributed = DistributedModel(model, config)
    distributed.setup(full)
    distributed.domain.partitioner.wrapped_axes[:] = False
    ids = distributed.domain.select_owned(full.positions, full.cell[0])
    owned = full.select_nodes(ids)
    owned.add_node_property("global_ids", ids)
    built = distributed.domain.build(owned)
    layout = GivenRowsModel(model, comm, padding_species=18, skin=0.4)
    numbers, global_ids = built.atomic_numbers[: built.n_local], built.global_ids[: built.n_local]
    steps, previous = [], None
    for move in moves:
        moved = owned.positions + move[ids]
        positions = built.positions(moved, owned.cell[0], comm)[: built.n_local]
        result = layout(GivenRows(built.n_owned, positions, numbers, global_ids, owned.cell))
        view = layout.domain.view
        padded = torch.cat(
            [result["forces"], result["forces"].new_zeros(view.n_rows - view.n_local, 3)]
        )
        forces = sum_ghosts_into_owners(padded, view.slot(comm))[: view.n_owned]
        energy = comm.all_reduce(result["energy"], "sum")  # each rank's is its partial
        steps.append((view is previous, ids, forces, energy))
        previous = view
    return steps


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("model_name", ["lj", "mpnn"])
def test_listed_pairs_are_kept_until_a_row_moves_half_the_skin(
    model_name: str, world_size: int
) -> None:
    model, atoms = MODELS[model_name](), SYSTEMS["bulk"]()
    generator = torch.Generator().manual_seed(7)
    direction = torch.randn(len(atoms), 3, generator=generator, dtype=torch.float64)
    direction /= direction.norm(dim=1, keepdim=True)
    # largest displacement 0, 0.15 (< skin / 2: kept), 0.25 (> skin / 2: listed again) Å
    moves = [0.0 * direction, 0.15 * direction, 0.25 * direction]
    results = run_simulated(world_size, lambda comm: _listed_steps(comm, model, atoms, moves))
    for step, move in enumerate(moves):
        moved = atoms.copy()
        moved.positions += move.numpy()
        ref = reference(model, moved, ("energy", "forces"))
        forces = torch.zeros_like(ref["forces"])
        for rank_steps in results:
            kept, ids, owner_forces, energy = rank_steps[step]
            assert kept == (step == 1), f"step {step}: view kept {kept}"
            forces[ids] = owner_forces
            assert abs(float(energy[0] - ref["energy"][0])) < 1e-10 * len(atoms)
        assert float((forces - ref["forces"]).abs().max()) < FORCES_TOL, f"step {step}"


def _padded_row_counts(comm, ghost_counts):
    """`HaloView.n_rows` of the views of owned rows with each number of ghost rows."""
    layout = GivenRowsModel(lj_model(), comm, padding_species=18)
    generator = torch.Generator().manual_seed(3)
    n_owned = 60
    counts = []
    for n_ghost in ghost_counts:
        n_local = n_owned + n_ghost
        positions = 20.0 * torch.rand(n_local, 3, generator=generator, dtype=torch.float64)
        ids = torch.cat([torch.arange(n_owned), torch.arange(n_ghost) % n_owned])
        numbers = torch.full((n_local,), 18)
        layout.prepare(GivenRows(n_owned, positions, numbers, ids, torch.zeros(1, 3, 3)))
        counts.append(layout.domain.view.n_rows)
    return counts


def test_padded_rows_stay_put_while_the_ghost_count_wobbles() -> None:
    """The row count the model sees changes only when the rows outgrow it (a GPU kernel
    library may tune itself anew for each row count it meets)."""
    counts = run_simulated(1, lambda comm: _padded_row_counts(comm, [40, 38, 41, 80]))[0]
    assert counts[0] >= 100 and counts[0] == counts[1] == counts[2], counts
    assert counts[3] >= 140, counts


def _given_rows_steps(comm, model, atoms, splits):
    """`GivenRowsModel` on an open cluster laid out by `x < split` (rank 0 owns those atoms,
    rank 1 the rest; every other atom a ghost row), one call per split: the energy and each
    rank's local-row forces keyed by global id."""
    layout = GivenRowsModel(model, comm, padding_species=18)
    positions = torch.tensor(atoms.positions)
    numbers = torch.tensor(atoms.numbers)
    steps = []
    for split in splits:
        mine = (positions[:, 0] < split) == (comm.rank == 0)
        ids = torch.cat([mine.nonzero()[:, 0], (~mine).nonzero()[:, 0]])
        n_owned = int(mine.sum())
        no_cell = torch.zeros(1, 3, 3, dtype=positions.dtype)
        result = layout(GivenRows(n_owned, positions[ids], numbers[ids], ids, no_cell))
        steps.append((ids, result["forces"], comm.all_reduce(result["energy"], "sum")))
    return steps


def test_a_rank_whose_atoms_all_leave_keeps_computing_exactly() -> None:
    """A model computing owned rows only (MACE) when every rank owns atoms: after a row
    layout in which one rank owns none, that path must not be taken (it cannot run on zero
    rows), and the results stay exact."""
    pytest.importorskip("mace")
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    model, atoms = MACEWrapper(tiny_mace()), SYSTEMS["cluster"]()
    atoms.numbers[:] = 18
    ref = reference(model, atoms, ("energy", "forces"))
    middle, beyond = float(atoms.positions[:, 0].mean()), float(atoms.positions[:, 0].max()) + 1
    results = run_simulated(2, lambda comm: _given_rows_steps(comm, model, atoms, [middle, beyond]))
    for step in range(2):
        forces = torch.zeros_like(ref["forces"])
        for rank_steps in results:
            ids, rows_forces, energy = rank_steps[step]
            forces.index_add_(0, ids, rows_forces)
            assert abs(float(energy[0] - ref["energy"][0])) < 1e-10 * len(atoms)
        assert float((forces - ref["forces"]).abs().max()) < FORCES_TOL, f"step {step}"


def test_a_steady_call_issues_one_all_reduce_the_layout_check() -> None:
    """Between layout changes a call all-reduces only the step's status: LAMMPS sums the
    energies over ranks itself, so the engine's energy all-reduce would be one collective
    per step more than `DomainParallel`'s step."""
    model, atoms = lj_model(), SYSTEMS["bulk"]()

    def all_reduces_per_call(comm) -> list[int]:
        calls = []
        original = comm.all_reduce

        def counted(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)

        comm.all_reduce = counted
        layout = GivenRowsModel(model, comm, padding_species=18)
        positions = torch.tensor(atoms.positions, dtype=torch.float64)
        mine = (positions[:, 0] < positions[:, 0].median()) == (comm.rank == 0)
        ids = torch.cat([torch.nonzero(mine).flatten(), torch.nonzero(~mine).flatten()])
        rows, numbers = positions[ids], torch.full((len(ids),), 18)
        counts = []
        for _ in range(3):
            calls.clear()
            no_cell = torch.zeros(1, 3, 3, dtype=torch.float64)
            layout(GivenRows(int(mine.sum()), rows, numbers, ids, no_cell))
            counts.append(len(calls))
        return counts

    for counts in run_simulated(2, all_reduces_per_call):
        assert counts[1:] == [1, 1], counts


def test_a_row_that_moves_on_one_rank_rebuilds_every_rank() -> None:
    """The listed pairs of one rank going stale rebuild every rank's view (the step's status
    all-reduce): the halo plan is collective, so a rank rebuilding alone would leave its
    peers waiting."""
    model, atoms = lj_model(), SYSTEMS["bulk"]()

    def rebuilds_per_call(comm) -> list[int]:
        layout = GivenRowsModel(model, comm, padding_species=18, skin=0.4)
        positions = torch.tensor(atoms.positions, dtype=torch.float64)
        mine = (positions[:, 0] < positions[:, 0].median()) == (comm.rank == 0)
        ids = torch.cat([torch.nonzero(mine).flatten(), torch.nonzero(~mine).flatten()])
        rows, numbers = positions[ids], torch.full((len(ids),), 18)
        no_cell = torch.zeros(1, 3, 3, dtype=torch.float64)
        counts = []
        for moved in (0.0, 0.3 if comm.rank == 0 else 0.0):  # past half the skin on rank 0
            layout(GivenRows(int(mine.sum()), rows + moved, numbers, ids, no_cell))
            counts.append(layout.domain.rebuilds)
        return counts

    assert run_simulated(2, rebuilds_per_call) == [[1, 2], [1, 2]]
