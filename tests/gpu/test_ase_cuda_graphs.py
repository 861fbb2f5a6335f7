"""ASE's VelocityVerlet with the calculator's force calls replayed from a captured CUDA graph
(`cuda_graphs=True`) follows the eager calculator's trajectory (float64, across
neighbour-list rebuilds) for LJ and cuEquivariance MACE. To rounding, not bit for bit:
scatters into atom rows use atomics on the GPU, and the eager calls run unpadded shapes."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
import pytest
import torch
from ase import Atoms
from ase.md.velocitydistribution import thermalize_momenta
from ase.md.verlet import VelocityVerlet
from ase.units import fs

from nvdd_plugins.ase import DomainDecomposedCalculator
from nvdd_plugins.models import BaseModelMixin
from tests.helpers.systems import MD_DT_FS, MD_SKIN, lj_model, triclinic_bulk

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

N_STEPS = 30
TOLERANCE = 1e-10  # Å and eV/Å


def _cueq_mace() -> BaseModelMixin:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace().to("cuda"), cuequivariance=True)


MODELS: dict[str, Callable[[], BaseModelMixin]] = {
    "lj": lambda: lj_model().to("cuda"),
    "mace_cueq": _cueq_mace,
}
NEEDS = {"lj": (), "mace_cueq": ("mace", "cuequivariance_torch")}


def _atoms(name: str) -> Atoms:
    atoms = triclinic_bulk()
    if name.startswith("mace"):
        atoms.numbers[::3] = 29  # both species of tiny_mace
    thermalize_momenta(atoms, temperature_K=600, rng=np.random.default_rng(5))
    return atoms


def _trajectory(name: str, graphs: bool) -> tuple[np.ndarray, np.ndarray, Atoms]:
    atoms = _atoms(name)
    atoms.calc = DomainDecomposedCalculator(
        MODELS[name](), skin=MD_SKIN, device="cuda", cuda_graphs=graphs
    )
    VelocityVerlet(atoms, MD_DT_FS * fs).run(N_STEPS)
    return atoms.positions.copy(), atoms.get_forces().copy(), atoms


@pytest.mark.parametrize("name", sorted(MODELS))
def test_graphed_force_calls_follow_the_eager_trajectory(name: str) -> None:
    if not all(importlib.util.find_spec(module) for module in NEEDS[name]):
        pytest.skip(f"needs {', '.join(NEEDS[name])}")
    positions, forces, _ = _trajectory(name, graphs=False)
    graphed_positions, graphed_forces, graphed = _trajectory(name, graphs=True)
    calls = graphed.calc.graphed_calls
    assert calls is not None and calls.failure is None
    rebuilds = graphed.calc.replicated_model.rebuilds
    assert rebuilds > 1 and calls.captures >= rebuilds - 1 and calls.replays > N_STEPS // 2
    print(
        f"{name}: rebuilds {rebuilds}, captures {calls.captures}, replays {calls.replays}, "
        f"max |dx| {np.abs(graphed_positions - positions).max():.2e} Å, "
        f"max |dF| {np.abs(graphed_forces - forces).max():.2e} eV/Å"
    )
    np.testing.assert_allclose(graphed_positions, positions, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(graphed_forces, forces, rtol=0, atol=TOLERANCE)
