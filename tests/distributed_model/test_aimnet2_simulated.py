"""AIMNet2 under ReplicatedModel / DomainParallel (simulated ranks) equals aimnet's own
calculator in float64: energy, forces, stress, and the equilibrated charges, whose
per-molecule sums are all-reduced across ranks."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

pytest.importorskip("aimnet")

from ase.md.velocitydistribution import thermalize_momenta

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import AIMNet2Wrapper, evaluate_model
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.aimnet_models import (
    PME_AGAINST_AIMNET,
    aimnet_calculator,
    aimnet_reference,
    assert_aimnet_close,
    lattice_case,
    reciprocal_sums_per_rank,
    tiny_aimnet2,
    with_species,
)
from tests.helpers.oracle import (
    ENERGY_PER_ATOM_TOL,
    assert_close,
    assert_trajectory_matches,
    errors,
    properties_for,
    replicated,
)
from tests.helpers.systems import MD_SKIN, SYSTEMS, md_integrator, triclinic_bulk

pytestmark = pytest.mark.aimnet

CHARGE = {"cluster": 1.0, "bulk": 0.0}
PROPERTIES = {
    "cluster": ("energy", "forces", "charges"),
    "bulk": ("energy", "forces", "stress", "charges"),
}


@functools.cache
def _case(system: str) -> tuple[AIMNet2Wrapper, object, dict, dict]:
    """The wrapper, the atoms, aimnet's results and the wrapper's own in one process."""
    atoms = with_species(SYSTEMS[system]())
    model = tiny_aimnet2()
    calc = aimnet_calculator(model)
    wrapper = AIMNet2Wrapper(model, calc.external_coulomb, charge=CHARGE[system])
    ref = aimnet_reference(calc, atoms, CHARGE[system])
    single = evaluate_model(wrapper, Batch.from_atoms(atoms), properties_for(atoms))
    return wrapper, atoms, ref, single


def _check_every_rank(system: str, world_size: int, **options) -> None:
    wrapper, atoms, ref, single = _case(system)
    results = run_simulated(
        world_size, lambda comm: replicated(comm, wrapper, atoms, PROPERTIES[system], **options)
    )
    for rank, result in enumerate(results):
        errs = {k: float((result[k] - ref[k]).abs().max()) for k in ref}
        errs["energy"] /= len(atoms)
        assert_aimnet_close(errs, f"{system}/rank{rank}")
        energies = float((result["energies"] - single["energies"]).abs().max())
        assert energies < ENERGY_PER_ATOM_TOL, (system, rank, energies)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("system", ["cluster", "bulk"])
def test_aimnet2_matches_aimnet(system: str, world_size: int) -> None:
    _check_every_rank(system, world_size)


@pytest.mark.parametrize("system", ["cluster", "bulk"])
def test_aimnet2_under_graph_partition_matches_aimnet(system: str) -> None:
    _check_every_rank(system, 4, strategy=StrategyKind.GRAPH_PARTITION)


@functools.cache
def _lattice(method: str) -> tuple[AIMNet2Wrapper, object, dict, dict]:
    """As `_case`, with Ewald or PME Coulomb on the sheared crystal."""
    atoms = with_species(triclinic_bulk())
    wrapper, ref = lattice_case(method, atoms)
    single = evaluate_model(wrapper, Batch.from_atoms(atoms), properties_for(atoms))
    return wrapper, atoms, ref, single


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_aimnet2_lattice_sums_match_aimnet(method: str, world_size: int) -> None:
    """Every rank equals the single process to the float64 tolerances and aimnet's own
    calculator (same fixed parameters) to those of `PME_AGAINST_AIMNET` for PME."""
    wrapper, atoms, ref, single = _lattice(method)
    properties = PROPERTIES["bulk"]
    grid = (1, 1, 1) if world_size == 1 else None
    results = run_simulated(
        world_size, lambda comm: replicated(comm, wrapper, atoms, properties, grid)
    )
    limits = PME_AGAINST_AIMNET if method == "pme" else None
    for rank, result in enumerate(results):
        errs = {k: float((result[k] - ref[k]).abs().max()) for k in ref}
        errs["energy"] /= len(atoms)
        assert_aimnet_close(errs, f"{method}/rank{rank}", limits)
        assert_close(errors(result, single, len(atoms)), f"{method}/rank{rank}")


def test_aimnet2_lattice_sums_under_graph_partition() -> None:
    wrapper, atoms, _, single = _lattice("pme")
    strategy = StrategyKind.GRAPH_PARTITION
    results = run_simulated(
        3, lambda comm: replicated(comm, wrapper, atoms, PROPERTIES["bulk"], strategy=strategy)
    )
    for rank, result in enumerate(results):
        assert_close(errors(result, single, len(atoms)), f"graph/rank{rank}")


@pytest.mark.parametrize("method", ["ewald", "pme"])
def test_reciprocal_sums_left_per_rank_are_wrong(method: str) -> None:
    """Negative control: without the all-reduce of the structure factors (or mesh) the
    charges stay exact (their sums are all-reduced) but energy and forces are off."""
    wrapper, atoms, _, single = _lattice(method)

    def per_rank(comm):
        with reciprocal_sums_per_rank():
            return replicated(comm, wrapper, atoms, PROPERTIES["bulk"])

    for result in run_simulated(2, per_rank):
        assert float((result["charges"] - single["charges"]).abs().max()) < 1e-10
        errs = errors(result, single, len(atoms))
        assert errs["energy"] > 1e-4 and errs["forces"] > 1e-3, errs


class _ChargeSumsPerRank(AIMNet2Wrapper):
    """Leaves aimnet's per-molecule sums alone: each rank equilibrates the charges of its own
    atoms only (the negative control of the all-reduced sums)."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        spec = super().distribution_spec(strategy)
        distribution = dataclasses.replace(spec.distribution, third_party_helpers=())
        return dataclasses.replace(spec, distribution=distribution)


def test_charge_sums_left_per_rank_are_wrong() -> None:
    wrapper, atoms, ref, _ = _case("cluster")
    local = _ChargeSumsPerRank(wrapper.model, wrapper.coulomb, charge=wrapper.charge)
    result = run_simulated(2, lambda comm: replicated(comm, local, atoms, PROPERTIES["cluster"]))
    assert float((result[0]["charges"] - ref["charges"]).abs().max()) > 1e-3
    assert float((result[0]["forces"] - ref["forces"]).abs().max()) > 1e-6


class _WrongTargetRow(AIMNet2Wrapper):
    """Claims that pair sums go onto `edge_index[1]` (the wrapper writes onto row 0)."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        spec = super().distribution_spec(strategy)
        distribution = dataclasses.replace(spec.distribution, edge_target_row=1)
        return dataclasses.replace(spec, distribution=distribution)


def test_a_wrong_target_row_claim_is_refused() -> None:
    wrapper, atoms, _, _ = _case("bulk")
    wrong = _WrongTargetRow(wrapper.model, wrapper.coulomb)
    with pytest.raises(RuntimeError, match="edge_target_row"):
        run_simulated(2, lambda comm: replicated(comm, wrong, atoms, PROPERTIES["bulk"]))


def test_aimnet2_trajectory_matches_one_process() -> None:
    """40 NVE steps of a hot H/C/O crystal (atoms migrate) on 2 ranks: positions on the
    single-process trajectory."""
    wrapper = _case("bulk")[0]
    atoms = with_species(triclinic_bulk())
    thermalize_momenta(atoms, temperature_K=600, rng=np.random.default_rng(5))
    full = Batch.from_atoms(atoms)
    nve = functools.partial(md_integrator, "nve")
    assert_trajectory_matches(wrapper, full, 40, nve, MD_SKIN)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_aimnet2_per_atom_virials_sum_to_the_global_virial(world_size: int) -> None:
    """Per-atom stresses (dE/dr per edge, half to each end) equal the single process's and
    sum to the stress, charge equilibration included."""
    from tests.helpers.aimnet_models import torture_aimnet2

    model, atoms = torture_aimnet2(4.0, 0), with_species(triclinic_bulk())
    properties = ("energy", "forces", "stress", "stresses")
    ref = evaluate_model(model, Batch.from_atoms(atoms), properties)
    assert float((ref["stresses"].sum(0) - ref["stress"][0]).abs().max()) < 1e-12
    results = run_simulated(world_size, lambda comm: replicated(comm, model, atoms, properties))
    for result in results:
        assert float((result["stresses"] - ref["stresses"]).abs().max()) < 1e-12
        assert float((result["stresses"].sum(0) - result["stress"][0]).abs().max()) < 1e-12
