"""Steps replayed from a captured graph (`GraphedSteps`) on the CPU with `EagerStepGraph`:
the bookkeeping (static buffers, steps masked after the stale flag, the eager rebuild step,
hook windows, the step count) gives the eager trajectory bit for bit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from nvdd_plugins import Batch, DomainConfig, DomainParallel
from nvdd_plugins.comm import LocalCommunicator
from nvdd_plugins.distributed_model.layouts import model as model_layout
from nvdd_plugins.distributed_model.layouts.one_process import OneProcessEvaluator
from nvdd_plugins.dynamics import (
    NVE,
    AttachedHook,
    BaseDynamics,
    DynamicsStage,
    NoseHoover,
    NVTLangevin,
)
from nvdd_plugins.dynamics.graph_payoff import GraphPayoff
from nvdd_plugins.dynamics.graphed import hook_free_steps
from nvdd_plugins.models import BaseModelMixin
from tests.helpers.step_graphs import EagerStepGraph, stepped_then_run
from tests.helpers.systems import MD_DT_FS, MD_SKIN, hot_bulk, lj_model, mpnn_model

N_STEPS = 40


class _Recorder:
    """An AFTER_STEP hook every 7 steps keeping the step and positions."""

    stage = DynamicsStage.AFTER_STEP
    frequency = 7

    def __init__(self) -> None:
        self.seen: list[tuple[int, torch.Tensor]] = []

    def __call__(self, ctx, stage) -> None:
        self.seen.append((ctx.step, ctx.batch.positions.clone()))


def _system(model: BaseModelMixin) -> Batch:
    batch = hot_bulk()
    batch.atomic_numbers[::3] = 29  # Ar and Cu: both species of tiny MACE
    return batch


def _nve(model: BaseModelMixin) -> BaseDynamics:
    return NVE(model, MD_DT_FS)


def _langevin(model: BaseModelMixin) -> BaseDynamics:
    return NVTLangevin(model, MD_DT_FS, temperature=300.0, friction=0.05, seed=7)


def _graphed(
    model: BaseModelMixin,
    graph: type = EagerStepGraph,
    required: bool = True,
    hooks=(),
    dynamics: Callable[[BaseModelMixin], BaseDynamics] = _nve,
) -> tuple[DomainParallel, Batch]:
    """`DomainParallel(dynamics(model))` at one rank, fixed shapes, replaying through
    `graph`, and its partitioned system; `required` False stands for "auto" resolved on a
    GPU."""
    config = DomainConfig(
        cutoff=model.cutoff, skin=MD_SKIN, mesh=LocalCommunicator(), cuda_graphs=True
    )
    dd = DomainParallel(dynamics(model), config, hooks=list(hooks))
    dd.dynamics.graphed.graph_factory = graph
    dd.model._graphs_required = required
    return dd, dd.partition(_system(model))


def _run(
    model: BaseModelMixin,
    graphed: bool,
    steps: int = N_STEPS,
    dynamics: Callable[[BaseModelMixin], BaseDynamics] = _nve,
) -> tuple[Batch, DomainParallel, _Recorder]:
    """`steps` of `dynamics` (NVE) at one rank, fixed shapes: replayed (`graphed`) or eager
    steps."""
    recorder = _Recorder()
    dd, batch = _graphed(model, hooks=[recorder], dynamics=dynamics)
    if graphed:
        dd.run(batch, steps)
    else:
        for _ in range(steps):
            dd.step(batch)
    return batch, dd, recorder


def _mace() -> BaseModelMixin:
    """tiny MACE: its spec drops the edges into ghost rows, which fixed shapes leave out."""
    pytest.importorskip("mace")
    from nvdd_plugins.models import MACEWrapper
    from tests.helpers.mace_models import tiny_mace

    return MACEWrapper(tiny_mace())


@pytest.mark.parametrize(
    ("make_model", "steps", "dynamics"),
    [
        (lj_model, N_STEPS, _nve),
        (mpnn_model, N_STEPS, _nve),
        (lj_model, N_STEPS, _langevin),
        pytest.param(_mace, 20, _nve, marks=[pytest.mark.mace, pytest.mark.slow]),
    ],
    ids=["lj", "mpnn", "lj-langevin", "mace"],
)
def test_replayed_steps_equal_eager_steps(make_model, steps: int, dynamics) -> None:
    """Langevin's noise is a function of the step count, a device counter in replays: a
    replay reading the count the replays started from would repeat one step's noise."""
    eager, eager_dd, eager_hook = _run(make_model(), graphed=False, steps=steps, dynamics=dynamics)
    replayed, dd, hook = _run(make_model(), graphed=True, steps=steps, dynamics=dynamics)
    assert dd.model.rebuilds >= 3  # the run crosses rebuilds
    assert dd.model.rebuilds == eager_dd.model.rebuilds
    # a graph per view replayed (a view stale at its first replayed step has none)
    assert 2 <= dd.dynamics.graphed.captures <= dd.model.rebuilds
    assert dd.dynamics.step_count == eager_dd.dynamics.step_count == steps
    for name in ("positions", "velocities", "forces", "energy"):
        assert torch.equal(getattr(replayed, name), getattr(eager, name)), name
    every_seventh = list(range(7, steps + 1, 7))
    assert [s for s, _ in hook.seen] == [s for s, _ in eager_hook.seen] == every_seventh
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(hook.seen, eager_hook.seen, strict=True))


def test_fixed_shapes_match_the_pruned_eager_run() -> None:
    model = lj_model()
    replayed, _, _ = _run(model, graphed=True)
    config = DomainConfig(cutoff=model.cutoff, skin=MD_SKIN, mesh=LocalCommunicator())
    dd = DomainParallel(NVE(model, MD_DT_FS), config)
    batch = dd.partition(_system(model))
    dd.run(batch, N_STEPS)
    assert dd.config.cuda_graphs == "auto" and dd.model.config.cuda_graphs is False  # CPU
    assert torch.allclose(replayed.positions, batch.positions, rtol=0, atol=1e-10)


def test_graphs_default_to_auto() -> None:
    assert DomainConfig(cutoff=5.0).cuda_graphs == "auto"
    assert OneProcessEvaluator.cuda_graphs == "auto"


def test_auto_is_off_on_the_cpu() -> None:
    model = lj_model()
    config = DomainConfig(
        cutoff=model.cutoff, skin=MD_SKIN, mesh=LocalCommunicator(), cuda_graphs="auto"
    )
    assert DomainParallel(NVE(model, MD_DT_FS), config).model.config.cuda_graphs is False
    langevin = NVTLangevin(model, MD_DT_FS, temperature=300.0, friction=0.01)
    assert DomainParallel(langevin, config).model.config.cuda_graphs is False
    assert NVE(model, MD_DT_FS).evaluator.captured_steps is True  # one process: NVE asks


def test_true_where_it_cannot_work_is_refused() -> None:
    model = lj_model()
    with pytest.raises(ValueError, match="cuda_graphs must be"):
        DomainConfig(cutoff=6.0, cuda_graphs="yes")
    config = DomainConfig(cutoff=model.cutoff, mesh=LocalCommunicator(), cuda_graphs=True)
    nose_hoover = NoseHoover(model, MD_DT_FS, temperature=300.0, tdamp=100.0)
    with pytest.raises(ValueError, match="integrator whose step can be captured"):
        DomainParallel(nose_hoover, config)
    chunked = DomainConfig(
        cutoff=model.cutoff, mesh=LocalCommunicator(), cuda_graphs=True, chunk_atoms=50
    )
    with pytest.raises(ValueError, match="chunk_atoms=None"):
        DomainParallel(NVE(model, MD_DT_FS), chunked)
    dd = DomainParallel(NVE(model, MD_DT_FS), config)  # accepted; the device is checked at capture
    batch = dd.partition(hot_bulk())
    with pytest.raises(ValueError, match="needs the model and atoms on a CUDA device"):
        dd.run(batch, 3)


def test_a_changed_host_input_is_captured_again() -> None:
    """A captured step holds the temperature as a constant: changing it captures again."""
    dd, batch = _graphed(lj_model(), dynamics=_langevin)
    dd.run(batch, 5)
    graphed = dd.dynamics.graphed
    captures = graphed.captures
    graphed.advance(batch, 1)
    assert graphed.captures == captures
    dd.dynamics.temperature = 600.0
    graphed.advance(batch, 1)
    assert graphed.captures == captures + 1


def test_a_subclass_changing_the_update_is_not_captured() -> None:
    class Rescaled(NVE):
        def post_update(self, batch: Batch) -> None:
            super().post_update(batch)
            batch.velocities = batch.velocities * 0.99

    class DeclaredRescaled(Rescaled):
        capturable = True

    assert NVE.capturable and not Rescaled.capturable and DeclaredRescaled.capturable


class _FailingStepGraph(EagerStepGraph):
    """A capture that fails as CUDA's does on a host read."""

    def capture(self, body) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_step_that_cannot_be_captured() -> None:
    """With cuda_graphs=True a clear error; asked for by "auto", eager steps."""
    model = lj_model()
    dd, batch = _graphed(model, _FailingStepGraph)
    with pytest.raises(RuntimeError, match="cuda_graphs=True: NVE's step could not be captured"):
        dd.run(batch, 3)
    eager, _, _ = _run(model, graphed=False)
    dd, batch = _graphed(model, _FailingStepGraph, required=False)
    dd.run(batch, N_STEPS)
    assert dd.dynamics.graphed.failure and dd.dynamics.graphed.captures == 0
    assert torch.equal(batch.positions, eager.positions)


class _TimedStepGraph(EagerStepGraph):
    """Virtual time: a warm-up step costs `warm_up_s`, a replay `replay_s`, nothing else."""

    warm_up_s = 0.010
    replay_s = 0.001

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.now = 0.0

    def warm_up(self, fn) -> None:
        super().warm_up(fn)
        self.now += self.warm_up_s

    def replay(self) -> None:
        super().replay()
        self.now += self.replay_s

    def clock(self) -> float:
        return self.now


class _SlowReplayGraph(_TimedStepGraph):
    """Replays that take as long as an eager step: kernel-bound, nothing to save."""

    replay_s = 0.010


class _OneOffCostGraph(_SlowReplayGraph):
    """Kernel-bound replays, and each graph's first warm-up also pays one-off costs (memory
    allocated afresh, kernels tuning themselves) worth ten eager steps."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.warmed = False

    def warm_up(self, fn) -> None:
        if not self.warmed:
            self.now += 10 * self.warm_up_s
        self.warmed = True
        super().warm_up(fn)


@pytest.mark.parametrize(
    ("graph", "declines"),
    [(_TimedStepGraph, False), (_SlowReplayGraph, True), (_OneOffCostGraph, True)],
)
def test_auto_captures_while_graphs_pay(graph: type[_TimedStepGraph], declines: bool) -> None:
    """ "auto" stops capturing once the replays so far saved less than their captures cost;
    the trajectory stays the eager one either way."""
    model = lj_model()
    eager, _, eager_hook = _run(model, graphed=False)
    recorder = _Recorder()
    dd, batch = _graphed(model, graph, required=False, hooks=[recorder])
    dd.run(batch, N_STEPS)
    graphed = dd.dynamics.graphed
    assert dd.model.rebuilds >= 3  # at least two captures were judged
    assert bool(graphed.declined) is declines
    assert graphed.captures == 1 if declines else graphed.captures >= 2
    assert torch.equal(batch.positions, eager.positions)
    assert [step for step, _ in recorder.seen] == [step for step, _ in eager_hook.seen]


def test_graphs_asked_for_never_decline() -> None:
    dd, batch = _graphed(lj_model(), _SlowReplayGraph)
    dd.run(batch, N_STEPS)
    assert not dd.dynamics.graphed.declined and dd.dynamics.graphed.captures >= 2


def test_hook_free_steps_agree_with_when_hooks_fire() -> None:
    """The arithmetic window equals stepping through `AttachedHook.due` one step at a time."""
    hooks = [
        AttachedHook(lambda ctx, stage: None, DynamicsStage.BEFORE_STEP, 5),
        AttachedHook(lambda ctx, stage: None, DynamicsStage.AFTER_STEP, 7),
        AttachedHook(lambda ctx, stage: None, DynamicsStage.ON_CONVERGE, 1),
    ]
    before = (DynamicsStage.BEFORE_STEP, DynamicsStage.BEFORE_COMPUTE, DynamicsStage.AFTER_COMPUTE)

    def stepped(start: int, limit: int) -> int:
        for taken in range(limit):
            step = start + taken
            due = any(h.due(stage, step) for h in hooks for stage in before)
            if due or any(h.due(DynamicsStage.AFTER_STEP, step + 1) for h in hooks):
                return taken
        return limit

    for start in range(40):
        for limit in (0, 1, 3, 50):
            assert hook_free_steps(hooks, start, limit) == stepped(start, limit)
    assert hook_free_steps([], 3, 10**9) == 10**9


def test_one_process_replays_equal_its_eager_steps(monkeypatch) -> None:
    """An integrator run on its own ("auto", here resolved as for a model on a GPU)."""
    monkeypatch.setattr(model_layout, "_on_cuda", lambda model: True)
    monkeypatch.setattr(OneProcessEvaluator, "cuda_graphs", "auto")

    def make() -> tuple[Batch, NVE]:
        dynamics = NVE(lj_model(), MD_DT_FS, skin=MD_SKIN)
        dynamics.graphed.graph_factory = _TimedStepGraph  # replays that pay
        return _system(dynamics.model), dynamics

    runs = stepped_then_run(make, N_STEPS)
    (eager, _), (replayed, dynamics) = runs
    assert dynamics.evaluator.engine.config.cuda_graphs is True
    assert dynamics.graphed.captures >= 2 and dynamics.step_count == N_STEPS
    for name in ("positions", "velocities", "forces", "energy"):
        assert torch.equal(getattr(replayed, name), getattr(eager, name)), name


def test_graph_payoff_weighs_captures_against_replays() -> None:
    payoff = GraphPayoff()
    assert payoff.pays() and payoff.replayed_step is None  # nothing captured yet
    payoff.captured(eager_step=0.010, seconds=0.030)
    payoff.replayed(kept=2, seconds=0.004)  # saved 2 x (10 - 2) ms = 16 ms < 30 ms
    assert not payoff.pays()
    payoff.replayed(kept=3, seconds=0.006)  # 40 ms saved in all
    assert payoff.pays() and payoff.replayed_step == pytest.approx(0.002)
    assert "1 captures cost 0.030 s" in str(payoff)
    # a warm-up slowed by one-off costs does not stand for the eager step
    payoff.captured(eager_step=0.500, seconds=0.520)
    assert payoff.eager_step == 0.010 and payoff.saved == pytest.approx(0.040)
    assert not payoff.pays()
