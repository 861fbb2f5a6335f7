"""An integrator without `DomainParallel` runs the one-rank engine (`OneProcessEvaluator`)
and stays on the single-process oracle's trajectory (`evaluate_model` on a fresh list)."""

from __future__ import annotations

import ase.units
import numpy as np
import pytest
import torch
from ase import Atoms

from nvdd_plugins import AtomicData, Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.distributed_model import NonFiniteError
from nvdd_plugins.dynamics import NPT, NVE, BaseDynamics, MTKParameters, VariableCellFIRE
from nvdd_plugins.models import ModelEvaluator
from tests.helpers.oracle import ENERGY_PER_ATOM_TOL, FORCES_TOL, on_the_oracle
from tests.helpers.systems import (
    MD_DT_FS,
    MD_SKIN,
    ShiftPairModel,
    cluster,
    hot_bulk,
    lj_model,
    mpnn_model,
    slab,
)


def random_atoms(seed: int, n_atoms: int = 64, temperature: float = 400.0) -> Atoms:
    """Atoms dropped at random (none closer than 3.2 Å) into a random triclinic cell
    (70 Å³ per atom, a hot argon fluid), with random velocities."""
    rng = np.random.default_rng(seed)
    cell = np.eye(3) * (n_atoms * 70.0) ** (1 / 3) + rng.uniform(-2.5, 2.5, (3, 3))
    atoms = Atoms(cell=cell, pbc=True)
    while len(atoms) < n_atoms:
        atoms.append("Ar")
        atoms.positions[-1] = rng.uniform(0, 1, 3) @ cell
        if len(atoms) > 1 and atoms.get_distances(-1, range(len(atoms) - 1), mic=True).min() < 3.2:
            atoms.pop()
    sigma = np.sqrt(ase.units.kB * temperature / atoms.get_masses()[:, None])
    atoms.set_velocities(rng.normal(size=(n_atoms, 3)) * sigma)
    return atoms


def random_system(seed: int, n_atoms: int = 64) -> Batch:
    """`random_atoms` as a one-system batch."""
    return Batch.from_atoms(random_atoms(seed, n_atoms))


def _from_atoms(make) -> Batch:
    atoms = make()
    rng = np.random.default_rng(4)
    atoms.set_velocities(rng.normal(scale=0.01, size=(len(atoms), 3)))
    return Batch.from_atoms(atoms)


def _run_both(make_dynamics, system: Batch, steps: int) -> tuple[Batch, Batch, BaseDynamics]:
    """`steps` of the default dynamics and of the same dynamics on the oracle."""
    plain, oracle = system.clone(), system.clone()
    dynamics = make_dynamics()
    dynamics.run(plain, steps)
    on_the_oracle(make_dynamics()).run(oracle, steps)
    return plain, oracle, dynamics


def _assert_same_trajectory(plain: Batch, oracle: Batch) -> None:
    for name in ("positions", "velocities", "cell"):
        if name in oracle:
            assert float((plain.get(name) - oracle.get(name)).abs().max()) < FORCES_TOL, name
    energy = float((plain.energy - oracle.energy).abs().max()) / plain.num_nodes
    assert energy < ENERGY_PER_ATOM_TOL
    assert float((plain.forces - oracle.forces).abs().max()) < FORCES_TOL


def test_plain_run_is_domain_parallel_at_one_rank() -> None:
    """The same engine, the same work: bit-identical to DomainParallel at one rank, and the
    Verlet list with skin is reused between rebuilds."""
    model, steps = lj_model(), 30
    plain = hot_bulk()
    dynamics = NVE(model, MD_DT_FS, skin=MD_SKIN)
    dynamics.run(plain, steps)
    config = DomainConfig(cutoff=model.cutoff, skin=MD_SKIN, mesh=LocalCommunicator())
    with DomainParallel(NVE(model, MD_DT_FS), config, steps) as dd:
        dd.partition(hot_bulk())
        dd.run()
        one_rank, rebuilds = dd.gather(dd.batch), dd.model.domain.rebuilds
    assert torch.equal(plain.positions, one_rank.positions)
    assert torch.equal(plain.velocities, one_rank.velocities)
    assert torch.equal(plain.forces, one_rank.forces)
    engine = dynamics.evaluator.engine
    assert engine is not None and engine.domain.rebuilds == rebuilds
    assert 1 < rebuilds < steps


@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("model", [lj_model, mpnn_model], ids=["lj_kernel", "mpnn_autograd"])
def test_random_system_follows_the_oracle(model, seed: int) -> None:
    system = random_system(seed)
    make = lambda: NVE(model(), MD_DT_FS, skin=MD_SKIN)  # noqa: E731
    plain, oracle, dynamics = _run_both(make, system, 40)
    _assert_same_trajectory(plain, oracle)
    assert float((plain.positions - system.positions).abs().max()) > 0.1  # it did move
    assert dynamics.evaluator.engine.domain.rebuilds > 1


@pytest.mark.parametrize("make_atoms", [cluster, slab], ids=["cluster", "slab"])
def test_open_axes_follow_the_oracle(make_atoms) -> None:
    make = lambda: NVE(lj_model(), MD_DT_FS, skin=MD_SKIN)  # noqa: E731
    plain, oracle, dynamics = _run_both(make, _from_atoms(make_atoms), 30)
    _assert_same_trajectory(plain, oracle)
    assert dynamics.evaluator.engine is not None


CELL_CHANGES = {
    "npt": lambda: NPT(
        lj_model(),
        MD_DT_FS,
        400.0,
        0.1 * ase.units.GPa,
        MTKParameters(tdamp=100.0, pdamp=400.0),
        anisotropic=True,
        skin=MD_SKIN,
    ),
    "variable_cell_fire": lambda: VariableCellFIRE(
        lj_model(), fmax=1e-3, pressure=0.05 * ase.units.GPa, skin=MD_SKIN
    ),
}


@pytest.mark.parametrize("name", sorted(CELL_CHANGES))
def test_cell_changes_follow_the_oracle(name: str) -> None:
    system = random_system(13)
    plain, oracle, _ = _run_both(CELL_CHANGES[name], system, 40)
    _assert_same_trajectory(plain, oracle)
    assert float((plain.cell - system.cell).abs().max()) > 1e-3  # the cell did change


def test_several_systems_keep_the_single_process_evaluator() -> None:
    """The engine takes one system; a batch of several is evaluated as before."""
    systems = [AtomicData.from_atoms(random_atoms(seed, n)) for seed, n in ((14, 32), (15, 40))]
    batch = Batch.from_data_list(systems)
    make = lambda: NVE(lj_model(), MD_DT_FS, skin=MD_SKIN)  # noqa: E731
    plain, oracle, dynamics = _run_both(make, batch, 10)
    _assert_same_trajectory(plain, oracle)
    assert dynamics.evaluator.engine is None


def test_model_without_a_spec_keeps_the_single_process_evaluator() -> None:
    class NoSpec(ShiftPairModel):
        def distribution_spec(self, strategy=None):
            return None

    make = lambda: NVE(NoSpec(), MD_DT_FS, skin=MD_SKIN)  # noqa: E731
    plain, oracle, dynamics = _run_both(make, random_system(16, 32), 10)
    _assert_same_trajectory(plain, oracle)
    assert dynamics.evaluator.engine is None


def test_another_system_sets_the_engine_up_again() -> None:
    """One dynamics run on a system, then on another with other atoms and cell."""
    dynamics = NVE(lj_model(), MD_DT_FS, skin=MD_SKIN)
    dynamics.run(random_system(17, 48), 5)
    second = random_system(18, 40)
    oracle = second.clone()
    dynamics.run(second, 10)
    on_the_oracle(NVE(lj_model(), MD_DT_FS)).run(oracle, 10)
    _assert_same_trajectory(second, oracle)


def test_float32_follows_the_float64_oracle() -> None:
    system = random_system(19, 48)
    single = system.to(dtype=torch.float32)
    NVE(lj_model(), MD_DT_FS, skin=MD_SKIN).run(single, 20)
    on_the_oracle(NVE(lj_model(), MD_DT_FS)).run(system, 20)
    assert single.positions.dtype == torch.float32
    assert float((single.positions.double() - system.positions).abs().max()) < 1e-4


def test_non_finite_positions_raise_a_clear_error() -> None:
    """As under DomainParallel: NaN positions are named, not integrated silently."""
    batch = random_system(20, 32)
    dynamics = NVE(lj_model(), MD_DT_FS, skin=MD_SKIN)
    dynamics.run(batch, 2)
    batch.positions = batch.positions.clone().index_fill_(0, torch.tensor([5]), float("nan"))
    with pytest.raises(
        NonFiniteError, match=r"^non-finite positions only on rank 0: atoms \[5\]\. "
    ):
        dynamics.run(batch, 1)


def test_oracle_helper_swaps_in_the_single_process_evaluator() -> None:
    dynamics = on_the_oracle(NVE(lj_model(), MD_DT_FS))
    assert isinstance(dynamics.evaluator, ModelEvaluator)
