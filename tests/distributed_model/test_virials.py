"""Per-atom virials ("stresses", from dE/dr per edge) on 1, 2 and 4 simulated ranks equal the
single-process values atom by atom, and sum to the global virial; halo and graph partition."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.geometry import attach_neighbor_list
from nvdd_plugins.models import BaseModelMixin, RadiusGraphMPNN, edge_vectors, evaluate_model
from nvdd_plugins.models.virials import new_pair_leaf
from tests.helpers.oracle import replicated
from tests.helpers.systems import SYSTEMS, ShiftPairModel, mpnn_model

VIRIAL_TOL = 1e-10  # eV, per atom and summed
WITH_VOLUME = ("bulk", "slab", "small_box")
PROPERTIES = ("energy", "forces", "stress", "stresses")


def _tiny_mace() -> BaseModelMixin:
    pytest.importorskip("mace")
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace())


def _cueq_mace() -> BaseModelMixin:
    pytest.importorskip("mace")
    pytest.importorskip("cuequivariance_torch")
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace(), cuequivariance=True)


MODELS = {
    "mpnn": mpnn_model,
    "pair": lambda: ShiftPairModel(5.0),
    "mace": _tiny_mace,
    "mace_cueq": _cueq_mace,
}  # SevenNet: tests/distributed_model/test_sevennet_simulated.py (its own environment)
TWO_SPECIES = {"mace", "mace_cueq"}


def _atoms(model_name: str, system: str):
    atoms = SYSTEMS[system]()
    if model_name in TWO_SPECIES:
        from tests.helpers.mace_models import with_two_species

        atoms = with_two_species(atoms)
    return atoms


def _reference(model: BaseModelMixin, atoms) -> dict[str, torch.Tensor]:
    return evaluate_model(model, Batch.from_atoms(atoms), PROPERTIES)


def _virial_error(stresses: torch.Tensor, ref: torch.Tensor, volume: float) -> float:
    return float((stresses - ref).abs().max()) * volume


@pytest.mark.parametrize("system", WITH_VOLUME)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_single_process_per_atom_sum_is_the_global_virial(model_name: str, system: str) -> None:
    model, atoms = MODELS[model_name](), _atoms(model_name, system)
    ref = _reference(model, atoms)
    volume = atoms.get_volume()
    assert ref["stresses"].shape == (len(atoms), 3, 3)
    error = _virial_error(ref["stresses"].sum(0), ref["stress"][0], volume)
    assert error < VIRIAL_TOL, error


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", WITH_VOLUME)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_distributed_per_atom_virials_match(model_name: str, system: str, world_size: int) -> None:
    model, atoms = MODELS[model_name](), _atoms(model_name, system)
    ref, volume = _reference(model, atoms), atoms.get_volume()
    results = run_simulated(world_size, lambda comm: replicated(comm, model, atoms, PROPERTIES))
    for rank, result in enumerate(results):
        label = f"{model_name}/{system}/np{world_size}/rank{rank}"
        assert _virial_error(result["stresses"], ref["stresses"], volume) < VIRIAL_TOL, label
        summed = _virial_error(result["stresses"].sum(0), result["stress"][0], volume)
        assert summed < VIRIAL_TOL, (label, summed)


@pytest.mark.parametrize("world_size", [2, 4])
def test_graph_partition_per_atom_virials_match(world_size: int) -> None:
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    ref, volume = _reference(model, atoms), atoms.get_volume()
    strategy = StrategyKind.GRAPH_PARTITION
    results = run_simulated(
        world_size, lambda comm: replicated(comm, model, atoms, PROPERTIES, strategy=strategy)
    )
    for result in results:
        assert _virial_error(result["stresses"], ref["stresses"], volume) < VIRIAL_TOL


def test_without_a_cell_volume_per_atom_stresses_are_nan() -> None:
    model, atoms = mpnn_model(), SYSTEMS["cluster"]()
    properties = ("energy", "forces", "stresses")
    alone = evaluate_model(model, Batch.from_atoms(atoms), properties)
    assert bool(alone["stresses"].isnan().all())
    for result in run_simulated(2, lambda comm: replicated(comm, model, atoms, properties)):
        assert bool(result["stresses"].isnan().all())


def test_only_computed_when_asked_for() -> None:
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    assert "stresses" not in evaluate_model(model, Batch.from_atoms(atoms), ("energy", "stress"))
    results = run_simulated(2, lambda comm: replicated(comm, model, atoms, ("energy", "stress")))
    assert all("stresses" not in result for result in results)


def test_the_split_between_atoms_is_tested() -> None:
    """Negative control: another split of the same edge terms (all of each edge on its first
    atom) also sums to the global virial but is far from the half-and-half values."""
    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    per_atom, volume = _reference(model, atoms)["stresses"], atoms.get_volume()
    batch = Batch.from_atoms(atoms)
    attach_neighbor_list(batch, model.cutoff)
    pairs = new_pair_leaf(batch.edge_index.shape[1], batch.positions)
    run = batch.copy()
    run.shifts = run.shifts + pairs
    with torch.enable_grad():
        (gradient,) = torch.autograd.grad(model(run)["energy"].sum(), pairs)
    terms = gradient.unsqueeze(2) * edge_vectors(batch).unsqueeze(1) / volume
    first_only = torch.zeros_like(per_atom).index_add_(0, batch.edge_index[0], terms)
    assert _virial_error(first_only.sum(0), per_atom.sum(0), volume) < VIRIAL_TOL
    assert _virial_error(first_only, per_atom, volume) > 1e-4


def test_ghost_rows_must_be_summed_into_owners(monkeypatch) -> None:
    """Negative control: without summing the ghost rows' shares into their owners, 2 ranks
    lose part of the per-atom virials (so the distributed test can fail)."""
    import nvdd_plugins.distributed_model.evaluation.results as results_module

    model, atoms = mpnn_model(), SYSTEMS["bulk"]()
    ref, volume = _reference(model, atoms), atoms.get_volume()
    monkeypatch.setattr(results_module, "sum_ghosts_into_owners", lambda value, slot: value)
    results = run_simulated(2, lambda comm: replicated(comm, model, atoms, PROPERTIES))
    assert _virial_error(results[0]["stresses"], ref["stresses"], volume) > 1e-4


def test_a_model_without_shift_vectors_is_refused() -> None:
    model, atoms = RadiusGraphMPNN().double(), SYSTEMS["bulk"]()
    with pytest.raises(ValueError, match="per-atom virials need edge vectors"):
        evaluate_model(model, Batch.from_atoms(atoms), PROPERTIES)


@pytest.mark.parametrize("system", ["bulk", "small_box"])
def test_mace_per_atom_stresses_equal_mace_own(system: str) -> None:
    """The same split as mace-torch's `compute_atomic_stresses` (which symmetrizes), on 2
    ranks."""
    wrapper, atoms = _tiny_mace(), _atoms("mace", system)
    from ase.stress import full_3x3_to_voigt_6_stress
    from mace.calculators import MACECalculator

    theirs = atoms.copy()
    theirs.calc = MACECalculator(
        models=wrapper.model, device="cpu", default_dtype="float64", compute_atomic_stresses=True
    )
    expected = theirs.get_stresses()
    for result in run_simulated(2, lambda comm: replicated(comm, wrapper, atoms, PROPERTIES)):
        ours = full_3x3_to_voigt_6_stress(result["stresses"].numpy())
        assert abs(ours - expected).max() * atoms.get_volume() < VIRIAL_TOL
