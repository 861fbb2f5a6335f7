"""compile=True on a GPU, alone and with CUDA graphs (cuda_graphs=True): the compiled steps
equal the eager ones (float64, to the rounding of GPU atomics), across rebuilds, with no
graph compiled after the warm-up and, with graphs, a capture per view; for LJ, MACE with
cuEquivariance's fused kernels, AIMNet2 and UMA."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial

import pytest
import torch
from torch._dynamo.utils import counters

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.dynamics import NVE
from tests.helpers.systems import MD_SKIN, hot_bulk, lj_model, triclinic_bulk

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

WARM_UP, STEPS, DT_FS = 10, 40, 2.0


def _run(
    model: torch.nn.Module,
    compile_: bool,
    graphs: bool,
    system: Callable[[], Batch] = hot_bulk,
    dt_fs: float = DT_FS,
) -> tuple[torch.Tensor, int, int, int]:
    """Positions after WARM_UP + STEPS steps of `system` (default: `hot_bulk`); graphs
    compiled after the warm-up, rebuilds, captures."""
    config = DomainConfig(
        cutoff=model.cutoff,
        skin=MD_SKIN,
        mesh=LocalCommunicator(),
        compile=compile_,
        cuda_graphs=graphs,
    )
    dd = DomainParallel(NVE(model, dt_fs), config)
    batch = dd.partition(system().to("cuda"))
    dd.run(batch, WARM_UP)
    graphs_before = counters["stats"]["unique_graphs"]
    dd.run(batch, STEPS)
    new = counters["stats"]["unique_graphs"] - graphs_before
    return batch.positions.detach(), new, dd.model.rebuilds, dd.dynamics.graphed.captures


@pytest.mark.parametrize("graphs", [False, True])
def test_compiled_steps_equal_eager_ones(graphs: bool) -> None:
    model = lj_model().to("cuda")
    eager, _, eager_rebuilds, _ = _run(model, False, False)
    compiled, new_graphs, rebuilds, captures = _run(model, True, graphs)
    assert rebuilds == eager_rebuilds >= 2
    assert new_graphs == 0
    assert captures >= (2 if graphs else 0)
    assert float((compiled - eager).abs().max()) < 1e-9


@pytest.mark.skipif(
    importlib.util.find_spec("cuequivariance_ops_torch") is None
    or importlib.util.find_spec("mace") is None,
    reason="needs mace-torch and cuequivariance-ops-torch",
)
def test_compiled_cueq_mace_steps_equal_eager_ones() -> None:
    """The copy prepared for compiling keeps every buffer on the GPU (deep-copying
    cuEquivariance's fx graphs put their constants on the CPU)."""
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    model = MACEWrapper(tiny_mace().to("cuda"), cuequivariance=True)
    eager, _, eager_rebuilds, _ = _run(model, False, False)
    compiled, new_graphs, rebuilds, _ = _run(model, True, True)
    assert rebuilds == eager_rebuilds >= 2
    assert new_graphs == 0
    assert float((compiled - eager).abs().max()) < 1e-9


def _aimnet2() -> tuple[torch.nn.Module, Callable[[], Batch], float]:
    from nvdd_plugins.models import AIMNet2Wrapper
    from tests.helpers.aimnet_models import tiny_aimnet2, with_species

    system = partial(hot_bulk, with_species(triclinic_bulk()))
    return AIMNet2Wrapper(tiny_aimnet2().to("cuda")), system, 0.5  # light atoms: short step


def _uma() -> tuple[torch.nn.Module, Callable[[], Batch], float]:
    from tests.helpers.uma_models import tiny_uma_wrapper

    return tiny_uma_wrapper().to("cuda"), hot_bulk, DT_FS


@pytest.mark.parametrize(("package", "build"), [("aimnet", _aimnet2), ("fairchem", _uma)])
def test_compiled_wrapper_steps_equal_eager_ones(
    package: str, build: Callable[[], tuple[torch.nn.Module, Callable[[], Batch], float]]
) -> None:
    """AIMNet2 and UMA: compiled with CUDA graphs, as a GPU user runs them."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"needs {package}")
    model, system, dt_fs = build()
    eager, _, eager_rebuilds, _ = _run(model, False, False, system, dt_fs)
    compiled, new_graphs, rebuilds, captures = _run(model, True, True, system, dt_fs)
    assert rebuilds == eager_rebuilds >= 2
    assert new_graphs == 0
    assert captures >= 2
    assert float((compiled - eager).abs().max()) < 1e-9
