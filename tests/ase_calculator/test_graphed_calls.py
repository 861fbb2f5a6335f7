"""The calculator's force calls replayed from a captured graph (`ReplayedCalls`) on the CPU
with `EagerStepGraph`: replays, the stale flag and the eager redo give the eager
trajectory bit for bit; and the leaner per-call work at one rank."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from ase import Atoms
from ase.md.velocitydistribution import thermalize_momenta
from ase.md.verlet import VelocityVerlet
from ase.units import fs

from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.distributed_model import NonFiniteError
from tests.helpers.step_graphs import EagerStepGraph
from tests.helpers.systems import MD_DT_FS, MD_SKIN, lj_model, mpnn_model, triclinic_bulk

N_STEPS = 30


def _attach(atoms: Atoms, graphed: bool) -> DomainDecomposedCalculator:
    """A one-rank calculator on the CPU for `atoms`, after its first (eager) call;
    `graphed`: `cuda_graphs=True` (set after construction, which refuses it on the CPU)
    with graphs that replay by calling again."""
    atoms.calc = calc = DomainDecomposedCalculator(lj_model(), skin=MD_SKIN)
    calc.config = dataclasses.replace(calc.config, cuda_graphs=graphed)
    atoms.get_forces()  # the first call sets the decomposition up
    if graphed:
        assert calc.graphed_calls is not None
        calc.graphed_calls.graph_factory = EagerStepGraph
    return calc


def _hot_atoms() -> Atoms:
    atoms = triclinic_bulk()
    thermalize_momenta(atoms, temperature_K=600, rng=np.random.default_rng(5))
    return atoms


def _trajectory(graphed: bool) -> tuple[list[np.ndarray], DomainDecomposedCalculator]:
    atoms = _hot_atoms()
    calc = _attach(atoms, graphed)
    frames: list[np.ndarray] = []
    dynamics = VelocityVerlet(atoms, MD_DT_FS * fs)
    dynamics.attach(lambda: frames.append(atoms.get_forces().copy()))
    dynamics.run(N_STEPS)
    return [atoms.positions.copy(), *frames], calc


def test_replayed_calls_equal_eager_calls() -> None:
    eager, eager_calc = _trajectory(graphed=False)
    graphed, calc = _trajectory(graphed=True)
    calls = calc.graphed_calls
    rebuilds = calc.replicated_model.rebuilds
    assert rebuilds > 1 and rebuilds == eager_calc.replicated_model.rebuilds
    assert calls.captures == rebuilds  # one graph per view after its checked eager call
    assert calls.replays > N_STEPS // 2
    for replayed, reference in zip(graphed, eager, strict=True):
        np.testing.assert_array_equal(replayed, reference)


def test_a_stale_replay_is_redone_eagerly() -> None:
    atoms = _hot_atoms()
    calc = _attach(atoms, graphed=True)  # the checked eager call
    for shift in (0.01, 0.02):  # a capture, a replay
        atoms.positions[0, 0] += shift
        atoms.get_forces()
    calls = calc.graphed_calls
    assert (calls.captures, calls.replays, calc.replicated_model.rebuilds) == (1, 2, 1)
    atoms.positions[0, 0] += MD_SKIN  # beyond half the skin: the replay is not kept
    forces = atoms.get_forces()
    assert calls.replays == 3 and calc.replicated_model.rebuilds == 2
    reference = atoms.copy()
    np.testing.assert_array_equal(forces, _attach(reference, graphed=False).results["forces"])


def test_graphs_on_the_cpu() -> None:
    with pytest.raises(ValueError, match="cuda_graphs=True needs a CUDA device, not cpu"):
        DomainDecomposedCalculator(lj_model(), cuda_graphs=True)
    atoms = _hot_atoms()
    atoms.calc = DomainDecomposedCalculator(lj_model(), cuda_graphs="auto")
    atoms.get_forces()
    atoms.positions[0, 0] += 0.01
    atoms.get_forces()
    assert atoms.calc.graphed_calls is None  # "auto" on the CPU: eager calls


def test_one_rank_computes_stress_only_when_asked() -> None:
    """A forces-only call (VelocityVerlet's) skips the strain derivative of an autograd
    model; get_stress() then evaluates again, to the stress of a call that asked first."""
    atoms = _hot_atoms()
    atoms.calc = DomainDecomposedCalculator(mpnn_model(), skin=MD_SKIN)
    atoms.get_forces()
    assert "stress" not in atoms.calc.results
    stress = atoms.get_stress()
    reference = atoms.copy()
    reference.calc = DomainDecomposedCalculator(mpnn_model(), skin=MD_SKIN)
    np.testing.assert_array_equal(stress, reference.get_stress())


def test_one_rank_exchanges_nothing() -> None:
    """A one-rank MPI communicator (mpi4py's COMM_WORLD without mpirun) is replaced by a
    local one: MPI would move every result through host memory."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    assert MPI.COMM_WORLD.Get_size() == 1
    calc = DomainDecomposedCalculator(lj_model())
    assert isinstance(calc.comm, LocalCommunicator)


def test_a_non_finite_replay_raises_as_an_eager_call_does() -> None:
    atoms = _hot_atoms()
    calc = _attach(atoms, graphed=True)
    atoms.positions[0, 0] += 0.01
    atoms.get_forces()  # captured and replayed
    atoms.positions[3] = np.nan
    with pytest.raises(
        NonFiniteError, match=r"^non-finite positions only on rank 0: atoms \[3\]\. "
    ):
        atoms.get_forces()
    assert calc.graphed_calls.replays == 2


def test_non_finite_results_name_their_atoms() -> None:
    atoms = _hot_atoms()
    atoms.positions[1] = atoms.positions[0]  # LJ at r = 0
    atoms.calc = DomainDecomposedCalculator(lj_model(), skin=MD_SKIN)
    with pytest.raises(NonFiniteError, match=r"^non-finite energies on rank 0: atoms \[0, 1\]\. "):
        atoms.get_forces()


def test_the_fast_state_check_agrees_with_ase() -> None:
    """The calculator's exact check gives ASE's changes (unchanged, moved, cell, species,
    charges added), so no call is answered from a stale cache."""
    from ase.calculators.calculator import Calculator

    atoms = _hot_atoms()
    atoms.calc = calc = DomainDecomposedCalculator(lj_model(), skin=MD_SKIN)
    atoms.get_forces()
    edits = [
        lambda a: None,
        lambda a: a.positions.__setitem__((0, 0), a.positions[0, 0] + 1e-9),
        lambda a: a.set_cell(a.cell.array * 1.01),
        lambda a: a.numbers.__setitem__(0, 36),
        lambda a: a.set_initial_charges(np.ones(len(a))),
    ]
    for edit in edits:
        moved = atoms.copy()
        edit(moved)
        assert calc.check_state(moved) == Calculator.check_state(calc, moved)
