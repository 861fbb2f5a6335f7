"""NVE steps replayed from a captured CUDA graph equal the eager steps at the same fixed
shapes, across neighbour-list rebuilds, for LJ, e3nn MACE, cuEquivariance MACE and UMA (float64),
and so do Langevin steps (noise from a device step counter), under `DomainParallel` at one
rank and in one process (the integrator's own engine). Equal to rounding, not bit for bit:
scatters into atom rows use atomics on the GPU, whose summation order varies from run to run
(eager against eager as well). The MPNN reads the periodic axes on the host in every forward
(minimum image), so its step cannot be captured: an error with cuda_graphs=True, eager steps
with "auto"."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.dynamics import NVE, BaseDynamics, NVTLangevin
from nvdd_plugins.models import BaseModelMixin
from tests.helpers.step_graphs import stepped_then_run
from tests.helpers.systems import MD_SKIN, hot_bulk, lj_model, mpnn_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

N_STEPS = 60
DT_FS = 2.0
TOLERANCE = 1e-9  # Å and Å/(ASE time): rounding of float64 atomics, grown over N_STEPS


def _skip_without(name: str) -> None:
    """Skip the test when a package model `name` needs is not installed."""
    needs = NEEDS.get(name, ())
    if not all(importlib.util.find_spec(module) is not None for module in needs):
        pytest.skip(f"needs {', '.join(needs)}")


def _mace(cueq: bool) -> BaseModelMixin:
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace().to("cuda"), cuequivariance=cueq)


def _uma() -> BaseModelMixin:
    from tests.helpers.uma_models import tiny_uma_wrapper

    return tiny_uma_wrapper().to("cuda")


MODELS: dict[str, Callable[[], BaseModelMixin]] = {
    "lj": lambda: lj_model().to("cuda"),
    "mace_e3nn": lambda: _mace(False),
    "mace_cueq": lambda: _mace(True),
    "uma": _uma,
}
NEEDS = {
    "mace_e3nn": ("mace",),
    "mace_cueq": ("mace", "cuequivariance_torch"),
    "uma": ("fairchem",),
}


def _system(name: str) -> Batch:
    batch = hot_bulk()
    if name.startswith("mace"):
        batch.atomic_numbers[::3] = 29  # both species of tiny_mace
    return batch.to("cuda")


def _langevin(model: BaseModelMixin, dt: float) -> BaseDynamics:
    return NVTLangevin(model, dt, temperature=600.0, friction=0.05, seed=11)


def _domain_parallel(
    name: str, integrator: Callable[[BaseModelMixin, float], BaseDynamics] = NVE
) -> list[tuple[Batch, DomainParallel]]:
    """Eager steps, then a replayed run, of `DomainParallel(integrator)` with
    cuda_graphs=True."""
    model = MODELS[name]()
    config = DomainConfig(
        cutoff=model.cutoff, skin=MD_SKIN, mesh=LocalCommunicator(), cuda_graphs=True
    )

    def make() -> tuple[Batch, DomainParallel]:
        dd = DomainParallel(integrator(model, DT_FS), config)
        return dd.partition(_system(name)), dd

    return stepped_then_run(make, N_STEPS)


def _deviation(a: Batch, b: Batch) -> float:
    return max(
        float((getattr(a, n) - getattr(b, n)).abs().max()) for n in ("positions", "velocities")
    )


@pytest.mark.parametrize("name", list(MODELS))
def test_domain_parallel_replays_equal_eager_steps(name: str) -> None:
    _skip_without(name)
    (eager, eager_dd), (replayed, dd) = _domain_parallel(name)
    rebuilds = dd.model.rebuilds
    assert rebuilds >= 2 and rebuilds == eager_dd.model.rebuilds
    assert dd.dynamics.graphed.captures >= 2  # a graph per view, across a rebuild
    assert dd.dynamics.step_count == N_STEPS
    deviation = _deviation(replayed, eager)
    print(f"{name}: {rebuilds} rebuilds, max deviation {deviation:.3g}", flush=True)
    assert deviation <= TOLERANCE


@pytest.mark.parametrize("name", ["lj", "mace_cueq"])
def test_langevin_replays_equal_eager_steps(name: str) -> None:
    """The noise of a replayed step is that of its own step count, as in eager steps."""
    _skip_without(name)
    (eager, eager_dd), (replayed, dd) = _domain_parallel(name, _langevin)
    assert dd.model.rebuilds == eager_dd.model.rebuilds >= 2
    assert dd.dynamics.graphed.captures >= 2 and dd.dynamics.step_count == N_STEPS
    assert _deviation(replayed, eager) <= TOLERANCE


def _one_process(model: BaseModelMixin, name: str) -> list[tuple[Batch, NVE]]:
    """Eager steps, then a run (replayed where it can be), of NVE in one process ("auto")."""
    return stepped_then_run(lambda: (_system(name), NVE(model, DT_FS, skin=MD_SKIN)), N_STEPS)


def test_one_process_integrator_replays_equal_eager_steps() -> None:
    """cuda_graphs "auto" in one process is on for a model on the GPU."""
    _skip_without("mace_cueq")
    (eager, _), (replayed, dynamics) = _one_process(MODELS["mace_cueq"](), "mace_cueq")
    assert dynamics.graphed.captures >= 2
    assert _deviation(replayed, eager) <= TOLERANCE


def test_a_model_reading_the_host_is_refused_or_run_eagerly() -> None:
    model = mpnn_model().to("cuda")
    config = DomainConfig(
        cutoff=model.cutoff, skin=MD_SKIN, mesh=LocalCommunicator(), cuda_graphs=True
    )
    dd = DomainParallel(NVE(model, DT_FS), config)
    batch = dd.partition(_system("mpnn"))
    with pytest.raises(RuntimeError, match="NVE's step could not be captured"):
        dd.run(batch, 5)
    (eager, _), (ran, dynamics) = _one_process(model, "mpnn")
    assert dynamics.graphed.failure and dynamics.graphed.captures == 0
    assert _deviation(ran, eager) <= TOLERANCE
