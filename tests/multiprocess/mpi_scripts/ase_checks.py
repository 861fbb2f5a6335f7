"""Run under `mpirun -n P python -m mpi4py`: the ASE calculator against its references."""

from __future__ import annotations

import importlib.util

import numpy as np
from ase import units
from ase.calculators.lj import LennardJones
from ase.md.langevin import Langevin
from ase.md.velocitydistribution import thermalize_momenta
from ase.md.verlet import VelocityVerlet
from ase.stress import full_3x3_to_voigt_6_stress
from mpi4py import MPI

from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import SimulatedMesh
from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import RadiusGraphMPNN
from tests.helpers.oracle import (
    ENERGY_PER_ATOM_TOL,
    FORCES_TOL,
    STRESS_TOL,
    properties_for,
    reference,
)
from tests.helpers.systems import (
    LJ_CUTOFF,
    LJ_EPSILON,
    LJ_SIGMA,
    SPARSE_SYSTEMS,
    SYSTEMS,
    lj_model,
    mpnn_model,
)

world = MPI.COMM_WORLD


def single_rank(model):
    """The same model evaluated on this rank alone (the single-process oracle)."""
    return DomainDecomposedCalculator(model, comm=SimulatedMesh(1).communicator(0))


def results_of(atoms, calc):
    atoms = atoms.copy()
    atoms.calc = calc
    result = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
    if atoms.cell.rank == 3:
        result["stress"] = atoms.get_stress()
    return result


def compare(atoms, calc, reference, label):
    """`reference`: an ASE calculator, or a dict of energy/forces/stress (Voigt)."""
    ref = reference if isinstance(reference, dict) else results_of(atoms, reference)
    atoms = atoms.copy()
    atoms.calc = calc
    de = abs(atoms.get_potential_energy() - ref["energy"]) / len(atoms)
    df = np.abs(atoms.get_forces() - ref["forces"]).max()
    assert de < ENERGY_PER_ATOM_TOL and df < FORCES_TOL, (label, de, df)
    if atoms.cell.rank == 3:
        ds = np.abs(atoms.get_stress() - ref["stress"]).max()
        assert ds < STRESS_TOL, (label, ds)
    forces = world.allgather(atoms.get_forces())
    assert all(np.array_equal(f, forces[0]) for f in forces), (label, "ranks disagree")


def as_ase_results(ref):
    """Reference tensors (energy, forces, 3x3 stress) as ASE results (Voigt stress)."""
    expected = {"energy": float(ref["energy"][0]), "forces": ref["forces"].numpy()}
    if "stress" in ref:
        expected["stress"] = full_3x3_to_voigt_6_stress(ref["stress"][0].numpy())
    return expected


def check_mace():
    """MACE through the calculator against mace-torch's own MACECalculator."""
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import mace_calculator_reference, tiny_mace, with_two_species

    model = tiny_mace()
    for name in ("bulk", "slab", "cluster"):
        atoms = with_two_species(SYSTEMS[name]())
        expected = as_ase_results(mace_calculator_reference(model, atoms))
        compare(atoms, DomainDecomposedCalculator(MACEWrapper(model)), expected, f"mace/{name}")


def check_graph_partition():
    """Graph partition through the calculator against the single-process evaluation."""
    for model in (mpnn_model(), RadiusGraphMPNN().double()):
        for name, build in {**SYSTEMS, **SPARSE_SYSTEMS}.items():
            atoms = build()
            expected = as_ase_results(reference(model, atoms, properties_for(atoms)))
            calc = DomainDecomposedCalculator(model, strategy=StrategyKind.GRAPH_PARTITION)
            compare(atoms, calc, expected, f"graph/{type(model).__name__}/{name}")


def trajectory(calc, thermostat):
    atoms = SYSTEMS["bulk"]()
    thermalize_momenta(atoms, temperature_K=500, rng=np.random.default_rng(3))
    atoms.calc = calc
    if thermostat:
        dyn = Langevin(
            atoms,
            4 * units.fs,
            temperature_K=500,
            friction=0.02,
            fixcm=False,
            rng=np.random.default_rng(9),
        )
    else:
        dyn = VelocityVerlet(atoms, 4 * units.fs)
    dyn.run(100)
    return atoms.get_positions()


def main() -> None:
    ase_lj = LennardJones(epsilon=LJ_EPSILON, sigma=LJ_SIGMA, rc=LJ_CUTOFF)
    for name, build in {**SYSTEMS, **SPARSE_SYSTEMS}.items():
        compare(build(), DomainDecomposedCalculator(lj_model()), ase_lj, f"lj/{name}")
        mpnn = mpnn_model()
        compare(build(), DomainDecomposedCalculator(mpnn), single_rank(mpnn), f"mpnn/{name}")
    if importlib.util.find_spec("mace") is not None:
        check_mace()
    check_graph_partition()
    print(f"rank {world.rank}: static OK", flush=True)

    for thermostat in (False, True):
        model = lj_model()
        distributed = trajectory(DomainDecomposedCalculator(model, skin=0.5), thermostat)
        alone = trajectory(single_rank(model), thermostat)
        assert np.abs(distributed - alone).max() < 1e-8, ("trajectory", thermostat)
    print(f"rank {world.rank}: trajectories OK", flush=True)

    atoms = SYSTEMS["bulk"]()
    if world.rank == 1:
        atoms.positions[0, 0] += 1e-6
    atoms.calc = DomainDecomposedCalculator(lj_model())
    try:
        atoms.get_potential_energy()
    except ValueError as err:
        assert "ranks hold different Atoms" in str(err)
    else:
        assert world.size == 1, "differing Atoms went unnoticed"
    print(f"rank {world.rank}: ALL OK", flush=True)


if __name__ == "__main__":
    main()
