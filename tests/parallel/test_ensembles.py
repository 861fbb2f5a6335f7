"""Global-reduction ensembles under `DomainParallel` equal the single-process run: one
all-reduce of declared partial sums per step, replicated state identical on every rank."""

from __future__ import annotations

import ase.units
import pytest

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import run_simulated
from nvdd_plugins.dynamics import (
    FIRE,
    NPH,
    NPT,
    MTKParameters,
    NoseHoover,
    VariableCellFIRE,
    local_sums,
)
from tests.helpers.ensembles import (
    domain_parallel,
    final_state,
    max_deviation,
    same_replicated_state,
    single_process,
)
from tests.helpers.systems import MD_DT_FS, MD_SKIN, hot_bulk, lj_model, triclinic_bulk

N_STEPS = 100  # NPT/NPH move the cell by over 3 Å in 100 steps
PRESSURE = 0.1 * ase.units.GPa
MTK = MTKParameters(tdamp=100.0, pdamp=400.0)

ENSEMBLES = {
    "nose_hoover": lambda m: NoseHoover(m, MD_DT_FS, 300.0, tdamp=100.0, skin=MD_SKIN),
    "npt": lambda m: NPT(m, MD_DT_FS, 300.0, PRESSURE, MTK, skin=MD_SKIN),
    "npt_anisotropic": lambda m: NPT(
        m, MD_DT_FS, 300.0, PRESSURE, MTK, anisotropic=True, skin=MD_SKIN
    ),
    "nph": lambda m: NPH(m, MD_DT_FS, PRESSURE, 400.0, 300.0, anisotropic=True, skin=MD_SKIN),
}
_references: dict[str, dict] = {}


def reference(name: str) -> dict:
    if name not in _references:
        _references[name] = single_process(ENSEMBLES[name], hot_bulk, N_STEPS)
    return _references[name]


# 3 ranks (a 3x1x1 grid) only in test-all: 2 and 4 ranks cover one and two split axes
@pytest.mark.parametrize("world_size", [2, pytest.param(3, marks=pytest.mark.slow), 4])
@pytest.mark.parametrize("name", sorted(ENSEMBLES))
def test_matches_one_process(name: str, world_size: int) -> None:
    """Positions, velocities and cell after 100 steps within 1e-8 (~1e-13 reached); the
    cell moves (NPT/NPH), so sub-domains and ghosts follow it every step."""
    expected = reference(name)
    results = run_simulated(
        world_size,
        lambda comm: domain_parallel(comm, ENSEMBLES[name], hot_bulk, N_STEPS),
        300,
    )
    for result in results:
        assert max_deviation(result, expected) < 1e-8
        assert result["reductions"] == N_STEPS + 1, "one all-reduce per step (+ the first)"
    assert same_replicated_state(results)
    assert all(r["owned"] > 0 for r in results)
    if name != "nose_hoover":
        assert float((expected["cell"] - hot_bulk().cell).abs().max()) > 0.5


def test_rank_local_sums_under_dd_diverge() -> None:
    """Negative control: the same run with the reducer put back to the single-process
    identity (each rank thermostats its own kinetic energy) is wrong."""

    def broken(model):
        dynamics = ENSEMBLES["nose_hoover"](model)
        dynamics.reduce_sums = local_sums  # instance attribute: DomainParallel's reducer unused
        return dynamics

    results = run_simulated(2, lambda comm: domain_parallel(comm, broken, hot_bulk, N_STEPS), 300)
    assert max_deviation(results[0], reference("nose_hoover")) > 1e-3


OPTIMIZERS = {
    "fire": lambda m: FIRE(m, fmax=1e-4, skin=MD_SKIN),
    "variable_cell": lambda m: VariableCellFIRE(
        m, fmax=1e-3, pressure=0.05 * ase.units.GPa, skin=MD_SKIN
    ),
}


def relax_system():
    return Batch.from_atoms(triclinic_bulk())


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fire_same_minimum_in_the_same_steps(name: str) -> None:
    factory = OPTIMIZERS[name]
    reference = single_process(factory, relax_system, 1000)
    assert 50 < reference["steps"] < 1000, "converges, but not at once"
    for world_size in (1, 2, 4):
        results = run_simulated(
            world_size, lambda comm: domain_parallel(comm, factory, relax_system, 1000), 300
        )
        for result in results:
            assert result["steps"] == reference["steps"], world_size
            assert max_deviation(result, reference) < 1e-8
            assert result["reductions"] == reference["steps"] + 1
        assert same_replicated_state(results)


def test_npt_checkpoint_restarts_at_another_rank_count(tmp_path) -> None:
    """Saved at 2 ranks after 100 steps, resumed at 3: the cell variables, chains and carried
    sums come back (the kinetic sums are reduced afresh) and the run ends where the
    uninterrupted single-process one does."""
    path = tmp_path / "npt.pt"
    factory = ENSEMBLES["npt_anisotropic"]

    def first(comm):
        model = lj_model()
        config = DomainConfig(cutoff=model.cutoff, skin=MD_SKIN, mesh=comm)
        with DomainParallel(factory(model), config, N_STEPS // 2) as dd:
            dd.partition(hot_bulk() if comm.rank == 0 else None)
            dd.run()
            dd.save_checkpoint(path)

    def second(comm):
        model = lj_model()
        dynamics = factory(model)
        config = DomainConfig(cutoff=model.cutoff, skin=MD_SKIN, mesh=comm)
        with DomainParallel(dynamics, config, N_STEPS // 2) as dd:
            dd.restore_checkpoint(path)
            dd.run()
            return final_state(dd.gather(dd.batch), dynamics)

    run_simulated(2, first, 300)
    results = run_simulated(3, second, 300)
    for result in results:
        assert result["steps"] == N_STEPS
        assert max_deviation(result, reference("npt_anisotropic")) < 1e-8
    assert same_replicated_state(results)
