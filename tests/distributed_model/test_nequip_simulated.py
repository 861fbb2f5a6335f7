"""NequIP and Allegro on simulated ranks: graph partition and per-atom virials equal the
single-process run, one cutoff of ghosts is exact for a 3-layer Allegro with no exchange in
its forward (and wrong for NequIP, which passes messages), and Allegro's DomainParallel NVE
trajectory stays on the single-process one. Real gloo ranks: tests/multiprocess."""

from __future__ import annotations

import dataclasses
import functools

import pytest

pytest.importorskip("nequip")
pytest.importorskip("allegro")

from nvdd_plugins import Batch
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import AllegroWrapper, NequIPWrapper, evaluate_model
from nvdd_plugins.spec import MLIPSpec
from tests.helpers.mace_models import with_two_species
from tests.helpers.nequip_models import (
    BUILDERS,
    WRAPPERS,
    nequip_reference,
    tiny_allegro,
    tiny_nequip,
)
from tests.helpers.oracle import (
    assert_close,
    assert_every_rank_close,
    assert_trajectory_matches,
    errors,
    properties_for,
    reference,
    replicated,
)
from tests.helpers.systems import MD_SKIN, SYSTEMS, hot_bulk, md_integrator

pytestmark = pytest.mark.nequip


@functools.cache
def _reference(kind: str, system: str) -> dict:
    return nequip_reference(BUILDERS[kind](), with_two_species(SYSTEMS[system]()))


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("kind", ["nequip", "allegro"])
def test_graph_partition_matches_nequip(kind: str, world_size: int) -> None:
    graph = StrategyKind.GRAPH_PARTITION
    for system in ("bulk", "cluster"):
        atoms = with_two_species(SYSTEMS[system]())
        ref = _reference(kind, system)
        assert_every_rank_close(world_size, WRAPPERS[kind](), atoms, ref, system, strategy=graph)


@pytest.mark.parametrize("kind", ["nequip", "allegro"])
def test_per_atom_virials(kind: str) -> None:
    """Per-atom virials at 2 ranks equal the single-process ones and sum to the global virial
    (eV)."""
    wrapper = WRAPPERS[kind]()
    atoms = with_two_species(SYSTEMS["bulk"]())
    properties = ("energy", "forces", "stress", "stresses")
    ref = evaluate_model(wrapper, Batch.from_atoms(atoms), properties)
    volume = atoms.get_volume()
    for result in run_simulated(2, lambda comm: replicated(comm, wrapper, atoms, properties)):
        assert float((result["stresses"] - ref["stresses"]).abs().max()) * volume < 1e-10
        summed = result["stresses"].sum(0) - result["stress"][0]
        assert float(summed.abs().max()) * volume < 1e-10


class _NequIPClaimingOneLayer(NequIPWrapper):
    """NequIP with Allegro's claim: one cutoff of ghosts is enough (false: it passes
    messages over its 3 convolutions)."""

    def distribution_spec(self, strategy: StrategyKind | None = None) -> MLIPSpec | None:
        return dataclasses.replace(super().distribution_spec(strategy), n_layers=1)


def _one_shell_errors(wrapper, atoms) -> list[dict[str, float]]:
    """2 ranks, each evaluating its sub-domain with a ghost shell of the spec's n_layers
    cutoffs and no exchange inside the forward (one chunk a rank)."""
    properties = properties_for(atoms)
    ref = reference(wrapper, atoms, properties)
    results = run_simulated(
        2, lambda comm: replicated(comm, wrapper, atoms, properties, chunk_atoms=100_000)
    )
    return [errors(result, ref, len(atoms)) for result in results]


def test_one_cutoff_of_ghosts_is_exact_for_allegro_and_not_for_nequip() -> None:
    atoms = with_two_species(SYSTEMS["bulk"]())
    for rank, errs in enumerate(
        _one_shell_errors(AllegroWrapper(tiny_allegro(num_layers=3)), atoms)
    ):
        assert_close(errs, f"allegro, 3 layers, rank {rank}")
    wrong = _one_shell_errors(_NequIPClaimingOneLayer(tiny_nequip(num_layers=3)), atoms)
    assert min(errs["forces"] for errs in wrong) > 1e-6, wrong


def test_allegro_trajectory_matches_one_process() -> None:
    """100 NVE steps of hot bulk (atoms migrate) on 2 ranks: positions on the single-process
    trajectory."""
    full = hot_bulk()
    full.atomic_numbers[::3] = 29
    nve = functools.partial(md_integrator, "nve")
    assert_trajectory_matches(AllegroWrapper(tiny_allegro()), full, 100, nve, MD_SKIN)
