"""DomainDecomposedCalculator in one process: ASE conventions, caching, no MPI needed."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from ase.calculators.lj import LennardJones
from torch._dynamo.utils import counters

from nvdd_plugins import DomainConfig
from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import LocalCommunicator
from tests.helpers.oracle import reference
from tests.helpers.systems import (
    LJ_CUTOFF,
    LJ_EPSILON,
    LJ_SIGMA,
    SYSTEMS,
    lj_model,
    mpnn_model,
)


def test_runs_without_mpi4py(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # `from mpi4py import MPI` now fails
    calc = DomainDecomposedCalculator(lj_model())
    assert isinstance(calc.comm, LocalCommunicator) and calc.comm.size == 1
    atoms, reference = SYSTEMS["bulk"](), SYSTEMS["bulk"]()
    atoms.calc = calc
    reference.calc = LennardJones(epsilon=LJ_EPSILON, sigma=LJ_SIGMA, rc=LJ_CUTOFF)
    assert abs(atoms.get_potential_energy() - reference.get_potential_energy()) < 1e-10
    assert np.abs(atoms.get_stresses() - reference.get_stresses()).max() < 1e-12
    assert np.abs(atoms.get_potential_energies() - reference.get_potential_energies()).max() < 1e-12


def test_decomposition_is_reused_until_atoms_move_more_than_half_the_skin() -> None:
    atoms = SYSTEMS["bulk"]()
    atoms.calc = DomainDecomposedCalculator(lj_model(), skin=0.6)
    atoms.get_forces()
    domain = atoms.calc.replicated_model.domain
    assert domain.rebuilds == 1
    atoms.positions[0, 0] += 0.2
    atoms.get_forces()
    assert domain.rebuilds == 1
    atoms.positions[0, 0] += 0.2
    atoms.get_forces()
    assert domain.rebuilds == 2
    atoms.set_cell(atoms.cell.array * 1.001, scale_atoms=True)
    atoms.get_stress()
    assert domain.rebuilds == 3


def test_changing_species_starts_a_new_decomposition() -> None:
    atoms = SYSTEMS["bulk"]()
    atoms.calc = DomainDecomposedCalculator(lj_model())
    atoms.get_potential_energy()
    first = atoms.calc.replicated_model
    atoms.numbers[0] = 36
    atoms.get_potential_energy()
    assert atoms.calc.replicated_model is not first


def test_results_are_cached_between_identical_calls() -> None:
    atoms = SYSTEMS["slab"]()
    atoms.calc = DomainDecomposedCalculator(lj_model())
    forces = atoms.get_forces()
    rebuilds = atoms.calc.replicated_model.domain.rebuilds
    assert np.array_equal(atoms.get_forces(), forces)
    assert atoms.calc.replicated_model.domain.rebuilds == rebuilds


def test_stress_of_a_cluster_is_not_implemented() -> None:
    atoms = SYSTEMS["cluster"]()
    atoms.calc = DomainDecomposedCalculator(lj_model())
    atoms.get_forces()
    with pytest.raises(Exception, match="stress"):
        atoms.get_stress()


def test_the_dtype_defaults_to_the_model_and_another_is_named() -> None:
    """A float32 model gets float32 atoms by default (the single-process evaluation of the
    same model in float32 is the reference); an explicit other dtype is refused at
    construction, naming both, instead of failing inside the model."""
    import torch

    from nvdd_plugins.data import Batch
    from nvdd_plugins.models import evaluate_model
    from tests.helpers.systems import mpnn_model

    model = mpnn_model().float()
    atoms = SYSTEMS["bulk"]()
    atoms.calc = DomainDecomposedCalculator(model)
    assert atoms.calc.dtype == torch.float32
    reference = evaluate_model(model, Batch.from_atoms(atoms, dtype=torch.float32))
    assert abs(atoms.get_potential_energy() - float(reference["energy"].sum())) < 1e-4
    assert np.abs(atoms.get_forces() - reference["forces"].numpy()).max() < 1e-6
    with pytest.raises(ValueError, match=r"computes in torch.float32 .* dtype=torch.float64"):
        DomainDecomposedCalculator(model, dtype=torch.float64)


def test_a_domain_config_reaches_the_engine_whole() -> None:
    """`config=` takes every `DomainConfig` option (here a ghost shell of three cutoffs,
    which no keyword of the calculator asks for), its mesh included; results as one process."""
    model = mpnn_model()
    views = []
    for config in (None, DomainConfig(cutoff=model.cutoff, skin=0.5, halo_layers=3)):
        atoms = SYSTEMS["bulk"]()
        atoms.calc = calc = DomainDecomposedCalculator(model, config=config)
        ref = reference(model, SYSTEMS["bulk"](), ("energy", "forces"))
        assert np.abs(atoms.get_forces() - ref["forces"].numpy()).max() < 1e-10
        assert np.abs(atoms.get_potential_energies() - ref["energies"].numpy()).max() < 1e-10
        assert calc.config.mesh is calc.comm
        views.append(calc.replicated_model.domain.view.n_local)
    assert views[1] > views[0]  # the wider shell holds more ghost rows


def test_options_beside_a_config_are_refused() -> None:
    model = lj_model()
    config = DomainConfig(cutoff=model.cutoff)
    with pytest.raises(ValueError, match="skin, cuda_graphs given beside config"):
        DomainDecomposedCalculator(model, skin=0.3, cuda_graphs=False, config=config)


def test_compile_through_the_calculator() -> None:
    """`config=DomainConfig(compile=True)`: the calculator's calls run the compiled forward
    (dynamo captures graphs), with the forces of one process."""
    model, atoms = lj_model(), SYSTEMS["bulk"]()
    config = DomainConfig(cutoff=model.cutoff, skin=0.5, compile=True)
    atoms.calc = DomainDecomposedCalculator(model, config=config)
    graphs = counters["stats"]["unique_graphs"]
    for _ in range(3):
        atoms.positions += 0.01
        ref = reference(model, atoms, ("forces",))
        assert np.abs(atoms.get_forces() - ref["forces"].numpy()).max() < 1e-10
    assert counters["stats"]["unique_graphs"] > graphs
