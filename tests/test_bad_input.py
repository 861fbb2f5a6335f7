"""Every row of docs/bad_input.md: bad input gets an error that says what to change (or, where
the input is legitimate, exact results). LAMMPS rows live in tests/lammps/test_errors.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase import Atoms

from nvdd_plugins import Batch, DistributedModel, DomainConfig, DomainParallel, ReplicatedModel
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import SimulatedMesh, run_simulated
from nvdd_plugins.dynamics import NVE
from nvdd_plugins.errors import DistributionRuleError
from nvdd_plugins.models import SimpleMPNN
from tests.helpers.oracle import assert_close, errors, properties_for, reference, replicated
from tests.helpers.systems import SYSTEMS, lj_model, mpnn_model


def _partition(batch: Batch | None, world_size: int = 2, **config) -> None:
    def run(comm):
        model = lj_model()
        options = {"cutoff": model.cutoff, "skin": 0.3, "mesh": comm, **config}
        dynamics = DomainParallel(NVE(model, 1.0), DomainConfig(**options), 2)
        dynamics.partition(batch if comm.rank == 0 else None)
        dynamics.run()

    run_simulated(world_size, run, timeout=30)


def _with_velocities(atoms: Atoms) -> Batch:
    batch = Batch.from_atoms(atoms)
    batch.add_node_property("velocities", torch.zeros_like(batch.positions))
    return batch


def _one_rank_calculator(model) -> DomainDecomposedCalculator:
    return DomainDecomposedCalculator(model, comm=SimulatedMesh(1).communicator(0))


def test_atoms_outside_a_non_periodic_box_are_exact() -> None:
    atoms = SYSTEMS["cluster"]()
    atoms.set_cell([6.0, 6.0, 6.0])
    atoms.positions += [-3.0, 2.0, 1.0]  # mostly outside the (open) cell
    model, properties = mpnn_model(), properties_for(atoms)
    ref = reference(model, atoms, properties)
    for result in run_simulated(3, lambda comm: replicated(comm, model, atoms, properties)):
        assert_close(errors(result, ref, len(atoms)), "outside the open box")


def test_zero_atoms() -> None:
    with pytest.raises(RuntimeError, match="partition\\(\\): the system has no atoms"):
        _partition(_with_velocities(Atoms(cell=[10.0, 10.0, 10.0], pbc=True)))
    atoms = Atoms(cell=[10.0, 10.0, 10.0], pbc=True)
    atoms.calc = _one_rank_calculator(lj_model())
    with pytest.raises(ValueError, match="has no atoms"):
        atoms.get_potential_energy()


def test_non_finite_input_positions() -> None:
    atoms = Atoms("Ar2", positions=[[0, 0, 0], [np.nan, 1, 1]], cell=[10, 10, 10], pbc=True)
    with pytest.raises(ValueError, match="positions contains NaN or infinite values"):
        _with_velocities(atoms)


def test_negative_skin_and_time_step() -> None:
    with pytest.raises(ValueError, match="skin must be >= 0"):
        DomainConfig(cutoff=5.0, skin=-1.0)
    for dt in (-1.0, 0.0):
        with pytest.raises(ValueError, match="dt must be a positive number of fs"):
            NVE(lj_model(), dt)


def test_grid_that_does_not_match_the_rank_count() -> None:
    with pytest.raises(RuntimeError, match=r"has 3 sub-domains but the mesh has 2 ranks.*e\.g\."):
        _partition(_with_velocities(SYSTEMS["bulk"]()), grid=(3, 1, 1))


def test_missing_velocities() -> None:
    with pytest.raises(
        RuntimeError, match=r"NVE needs per-atom fields .*velocities.*add_node_property"
    ):
        _partition(Batch.from_atoms(SYSTEMS["bulk"]()))


def test_element_beyond_the_model() -> None:
    atoms = SYSTEMS["bulk"]()
    atoms.numbers[3] = 105
    atoms.calc = _one_rank_calculator(SimpleMPNN(cutoff=4.5, hidden=8, n_layers=1).double())
    with pytest.raises(ValueError, match="max_atomic_number=100\\) got atomic number 105"):
        atoms.get_potential_energy()


class _UndeclaredOutput(SimpleMPNN):
    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = super().forward(batch)
        return {**out, "charges": torch.zeros_like(out["energies"])}


def test_output_the_spec_does_not_declare() -> None:
    model = _UndeclaredOutput(cutoff=4.5, hidden=8, n_layers=1).double()
    batch = Batch.from_atoms(SYSTEMS["bulk"]())
    distributed = ReplicatedModel(
        model, DomainConfig(cutoff=4.5, mesh=SimulatedMesh(1).communicator(0))
    )
    with pytest.raises(DistributionRuleError, match="output 'charges' has no OutputKind"):
        distributed(batch)


def test_domain_cutoff_smaller_than_the_model() -> None:
    with pytest.raises(ValueError, match="smaller than the model's cutoff"):
        DistributedModel(lj_model(), DomainConfig(cutoff=3.0))


def test_skewed_cell_with_a_zero_vector_on_an_open_axis_is_exact() -> None:
    """A 2-D hexagonal cell given as ASE often does (c = 0, pbc T T F): legitimate, exact."""
    rng = np.random.default_rng(4)
    cell = [[12.0, 0.0, 0.0], [-6.0, 10.392, 0.0], [0.0, 0.0, 0.0]]
    fractional = rng.uniform(0.0, 1.0, (12, 3))
    positions = fractional @ np.array([[12.0, 0, 0], [-6.0, 10.392, 0], [0, 0, 6.0]])
    atoms = Atoms("Ar12", positions=positions, cell=cell, pbc=(True, True, False))
    model, properties = mpnn_model(), ("energy", "forces")
    ref = reference(model, atoms, properties)
    for world_size in (1, 2, 3):
        results = run_simulated(world_size, lambda comm: replicated(comm, model, atoms, properties))
        for result in results:
            assert_close(errors(result, ref, len(atoms)), f"hexagonal cell, {world_size} ranks")


def test_unknown_balance_mode_and_threshold() -> None:
    with pytest.raises(ValueError, match='balance must be "auto" or "off"'):
        DomainConfig(cutoff=5.0, balance="shift")
    with pytest.raises(ValueError, match=r"balance_threshold .* must be >= 1"):
        DomainConfig(cutoff=5.0, balance_threshold=0.9)


def test_unknown_balance_weight() -> None:
    with pytest.raises(ValueError, match='balance_weight must be "atoms", "rows" or "time"'):
        DomainConfig(cutoff=5.0, balance_weight="ghosts")


@pytest.mark.parametrize("value", [0, 1, "yes", None, "True"])
def test_cuda_graphs_takes_only_bools_and_auto(value) -> None:
    """`0 in (True, False, "auto")` is true in Python: 0 passed and meant graphs on a GPU,
    1 acted as "auto". Only True, False and "auto" are taken, by DomainConfig and the ASE
    calculator alike (at construction, not at the first, collective, calculation)."""
    with pytest.raises(ValueError, match='cuda_graphs must be True, False or "auto"'):
        DomainConfig(cutoff=5.0, cuda_graphs=value)
    with pytest.raises(ValueError, match='cuda_graphs must be True, False or "auto"'):
        DomainDecomposedCalculator(lj_model(), cuda_graphs=value)


@pytest.mark.parametrize("world_size", [1, 4])
def test_float64_atoms_with_a_float32_model_are_cast_at_partition(world_size: int) -> None:
    """`Batch.from_atoms` gives float64 fields; a float32 model raised a raw dtype error in its
    first matrix product. partition() casts the system to the model's dtype, so the run is
    the one of a system built in float32, bit for bit."""
    model = mpnn_model().to(torch.float32)
    atoms = SYSTEMS["bulk"]()

    def run(comm, dtype):
        config = DomainConfig(cutoff=model.cutoff, skin=0.3, mesh=comm)
        dd = DomainParallel(NVE(model, 1.0), config, 3)
        batch = _with_velocities(atoms).to(dtype=dtype) if comm.rank == 0 else None
        dd.partition(batch)
        return dd.gather(dd.run())

    cast = run_simulated(world_size, lambda comm: run(comm, torch.float64), timeout=60)[0]
    built = run_simulated(world_size, lambda comm: run(comm, torch.float32), timeout=60)[0]
    assert cast.positions.dtype == torch.float32
    assert torch.equal(cast.positions, built.positions)
    assert torch.equal(cast.velocities, built.velocities)
