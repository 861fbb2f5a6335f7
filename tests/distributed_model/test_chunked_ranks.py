"""Sub-domains evaluated in chunks (`DomainConfig(chunk_atoms=...)`): each rank evaluates its
atoms chunk by chunk, every chunk with a ghost shell of the model's layers x cutoff, and the
results equal one process (float64 tolerances), at 1 to 4 ranks, for a kernel model (LJ), an
autograd MPNN and tiny MACE, periodic, slab and open, with empty ranks; NVE trajectories
through DomainParallel stay on the single-process one."""

from __future__ import annotations

import functools
import importlib.util

import ase.build
import numpy as np
import pytest
import torch
from ase import Atoms
from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

from nvdd_plugins import Batch, DomainConfig, ReplicatedModel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.models import LennardJonesModel, SimpleMPNN, evaluate_model
from tests.helpers.oracle import (
    assert_close,
    assert_trajectory_matches,
    errors,
    properties_for,
    reference,
    replicated,
)


def _copper(pbc: tuple[bool, bool, bool], repeat: tuple[int, int, int] = (6, 5, 4)) -> Atoms:
    """Rattled fcc Cu (480 atoms by default); open axes get no cell vector."""
    atoms = ase.build.bulk("Cu", "fcc", a=3.61, cubic=True).repeat(repeat)
    atoms.rattle(0.05, seed=1)
    atoms.pbc = pbc
    atoms.cell[[axis for axis in range(3) if not pbc[axis]]] = 0.0
    return atoms


SYSTEMS = {"bulk": (True, True, True), "slab": (True, True, False), "cluster": (False,) * 3}
MODELS = {
    # (model, rows per chunk at 1, 2, 3, 4 ranks: small enough for several chunks a rank)
    "lj": (lambda: LennardJonesModel(0.0104, 2.3, 4.0, shift=True), (400, 300, 300, 200)),
    "mpnn": (lambda: SimpleMPNN(cutoff=3.0, hidden=8, n_layers=2).double(), (400, 350, 350, 300)),
}


def _check(results: list[dict], ref: dict, n_atoms: int, chunk_atoms: int, label: str) -> None:
    owned = [int(r["n_owned"]) for r in results]
    assert sum(owned) == n_atoms, owned
    chunks = []
    for rank, result in enumerate(results):
        assert_close(errors(result, ref, n_atoms), f"{label} rank {rank}")
        if owned[rank]:
            rows = result["chunk_rows"]
            assert int(rows.max()) <= chunk_atoms, (label, rank, rows)
            chunks.append(len(rows))
    assert max(chunks) >= 2, f"{label}: no rank needed more than one chunk {chunks}"


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("kind", MODELS)
def test_chunks_on_every_rank_equal_one_process(kind: str, system: str, world_size: int) -> None:
    make, limits = MODELS[kind]
    model, atoms, chunk_atoms = make(), _copper(SYSTEMS[system]), limits[world_size - 1]
    properties = properties_for(atoms)
    ref = reference(model, atoms, properties)
    results = run_simulated(
        world_size,
        lambda comm: replicated(comm, model, atoms, properties, chunk_atoms=chunk_atoms),
    )
    _check(results, ref, len(atoms), chunk_atoms, f"{kind} {system} {world_size} ranks")


@pytest.mark.parametrize("kind", MODELS)
def test_empty_ranks_join_the_exchange(kind: str) -> None:
    """A slab split along its open axis into four, not balanced: most ranks own nothing. LJ
    computes its own per-atom forces, which the ranks without atoms must also list (a hang
    once)."""
    model, atoms, chunk_atoms = MODELS[kind][0](), _copper(SYSTEMS["slab"], (6, 5, 2)), 150
    atoms.cell[2] = [0.0, 0.0, 40.0]
    properties = properties_for(atoms)
    ref = reference(model, atoms, properties)
    results = run_simulated(
        4,
        lambda comm: replicated(
            comm,
            model,
            atoms,
            properties,
            grid=(1, 1, 4),
            chunk_atoms=chunk_atoms,
            balance="off",
        ),
        timeout=120,
    )
    assert [int(r["n_owned"]) for r in results].count(0) >= 1
    _check(results, ref, len(atoms), chunk_atoms, "slab z-split")


@pytest.mark.mace
@pytest.mark.skipif(importlib.util.find_spec("mace") is None, reason="needs mace-torch")
def test_mace_chunks_on_two_ranks() -> None:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace, with_two_species

    model = MACEWrapper(tiny_mace())
    atoms = with_two_species(_copper(SYSTEMS["cluster"], (8, 3, 3)))
    properties = properties_for(atoms)
    ref = reference(model, atoms, properties)
    chunk_atoms = 200
    results = run_simulated(
        2,
        lambda comm: replicated(comm, model, atoms, properties, chunk_atoms=chunk_atoms),
        timeout=600,
    )
    _check(results, ref, len(atoms), chunk_atoms, "tiny MACE")


def test_ase_calculator_in_chunks() -> None:
    from nvdd_plugins.ase import DomainDecomposedCalculator

    model, atoms = MODELS["mpnn"][0](), _copper(SYSTEMS["bulk"])
    ref = reference(model, atoms, ("energy", "forces"))

    def per_rank(comm):
        mine = atoms.copy()
        config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm, chunk_atoms=350)
        mine.calc = DomainDecomposedCalculator(model, config=config)
        return mine.get_potential_energy(), mine.get_forces(), mine.calc.replicated_model

    for energy, forces, replicated_model in run_simulated(3, per_rank):
        assert abs(energy - float(ref["energy"])) / len(atoms) < 1e-10
        assert float(abs(forces - ref["forces"].numpy()).max()) < 1e-8
        assert replicated_model.engine.chunks is not None


def test_nve_trajectory_in_chunks_follows_one_process() -> None:
    """Atoms migrate between ranks and views are rebuilt; positions stay on the reference."""
    make, limits = MODELS["mpnn"]
    model, atoms, chunk_atoms = make(), _copper(SYSTEMS["bulk"], (4, 4, 3)), limits[2]
    atoms.rattle(0.2, seed=3)
    MaxwellBoltzmannDistribution(atoms, temperature_K=600, rng=np.random.default_rng(3))
    nve = functools.partial(NVE, dt=2.0, skin=0.2)
    assert_trajectory_matches(
        model, Batch.from_atoms(atoms), 8, nve, 0.2, 3, 1e-10, chunk_atoms=chunk_atoms
    )


def test_models_with_global_sums_are_refused() -> None:
    """A spec whose forward all-reduces (charge equilibration) cannot run chunk by chunk."""
    from dataclasses import replace

    from nvdd_plugins import DistributedModel
    from nvdd_plugins.spec import AllReduceSum, OpAdapter

    class GlobalSumMPNN(SimpleMPNN):
        def distribution_spec(self, strategy=None):
            spec = super().distribution_spec(strategy)
            summed = OpAdapter(op=torch.ops.aten.sum.default, output_transforms={0: AllReduceSum()})
            return replace(spec, distribution=replace(spec.distribution, custom_ops=(summed,)))

    model = GlobalSumMPNN(cutoff=3.0, hidden=8, n_layers=2).double()
    with pytest.raises(ValueError, match="sums over the whole system"):
        DistributedModel(model, DomainConfig(model.cutoff, chunk_atoms=100))


def test_chunks_need_the_halo_strategy_and_an_eager_forward() -> None:
    with pytest.raises(ValueError, match="halo strategy"):
        DomainConfig(4.0, chunk_atoms=100, compile=True)
    with pytest.raises(ValueError, match="positive number of rows"):
        DomainConfig(4.0, chunk_atoms=0)


class _SquaresMPNN(SimpleMPNN):
    """The MPNN with a per-system output besides its energy: the sum of its per-atom
    energies squared (a node -> system sum, which each rank and chunk sums over its own
    atoms only)."""

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(batch)
        inputs = self.adapt_input(batch)
        squares = out["energies"].new_zeros(inputs.num_graphs)
        out["squares"] = squares.index_add(0, inputs.batch_idx, out["energies"] ** 2)
        return out

    def distribution_spec(self, strategy=None):
        from dataclasses import replace

        from nvdd_plugins.spec import OutputKind

        spec = super().distribution_spec(strategy)
        kinds = {**spec.output_kinds, "squares": OutputKind.PER_GRAPH}
        return replace(spec, output_kinds=kinds)


def test_per_system_outputs_and_per_atom_virials_in_chunks() -> None:
    """Chunks go through the same forward and results as the whole view: a per-system
    output (the ranks' and chunks' own atoms summed) and per-atom virials ("stresses",
    ghost images' shares owed to their atoms) equal one process."""
    model = _SquaresMPNN(cutoff=3.0, hidden=8, n_layers=2).double()
    atoms = _copper(SYSTEMS["bulk"])
    properties = ("energy", "forces", "stress", "stresses")
    ref = evaluate_model(model, Batch.from_atoms(atoms), properties)

    def run(comm):
        config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm, chunk_atoms=350)
        distributed = ReplicatedModel(model, config)
        result = distributed(Batch.from_atoms(atoms), properties)
        return result, len(distributed.engine.chunks.last_plan.rows)

    results = run_simulated(2, run)
    assert max(chunks for _, chunks in results) >= 2
    for result, _ in results:
        assert_close(errors(result, ref, len(atoms)), "chunks")
        assert torch.allclose(result["squares"], ref["squares"], rtol=0, atol=1e-10)
        assert float((result["stresses"] - ref["stresses"]).abs().max()) < 1e-9
