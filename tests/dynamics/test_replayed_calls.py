"""`ReplayedCalls`, the replayed force call the ASE calculator and the LAMMPS bridge share, on
the CPU with `EagerStepGraph` (a replay runs the captured call again): a new key's eager
calls, inputs copied into the captured ones, the flag that drops a replay, and "auto"
stopping when graphs do not pay."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.dynamics import ReplayedCalls
from tests.helpers.step_graphs import EagerStepGraph


def _doubling(positions: torch.Tensor, dropped: torch.Tensor | None = None):
    """An evaluation of `positions` (read where they are) and its flag."""
    return lambda: (2 * positions, dropped)


def test_a_new_key_runs_eagerly_then_replays_on_copied_inputs() -> None:
    calls = ReplayedCalls(EagerStepGraph, "a call", eager_calls=2)

    def call(inputs: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
        return calls(lambda: "view", inputs, _doubling(inputs[0]), required=True)

    held = torch.ones(4, 3)
    assert [call((held,)), call((held,))] == [None, None] and calls.captures == 0
    assert torch.equal(call((held,)), 2 * held)
    assert calls.captures == 1 and calls.replays == 1
    given = torch.full((4, 3), 3.0)  # another tensor of the same shape: copied in
    replayed = calls(lambda: "view", (given,), _doubling(held), required=True)
    assert torch.equal(replayed, 2 * given) and torch.equal(held, given)
    assert calls.captures == 1 and calls.replays == 2
    other = torch.ones(5, 3)  # another shape under the same key: captured anew
    assert torch.equal(call((other,)), 2 * other) and calls.captures == 2


def test_a_raised_flag_drops_the_replay() -> None:
    calls = ReplayedCalls(EagerStepGraph, "a call")
    positions, flag = torch.ones(2, 3), torch.zeros((), dtype=torch.bool)
    evaluate = _doubling(positions, flag)
    assert calls(lambda: 0, (positions,), evaluate, required=True) is not None
    flag.fill_(True)
    assert calls(lambda: 0, (positions,), evaluate, required=True) is None
    assert calls.replays == 2 and calls.captures == 1


@pytest.mark.parametrize("required", [False, True], ids=["auto", "true"])
def test_auto_stops_capturing_when_graphs_do_not_pay(required: bool) -> None:
    """A graph replayed once saves about nothing (its replay is the eager call here) and
    cost a warm-up call and its capture: "auto" captures no second key, True does."""
    calls = ReplayedCalls(EagerStepGraph, "a call")
    positions = torch.ones(4, 3)
    for view in range(2):
        result = calls(lambda view=view: view, (positions,), _doubling(positions), required)
        assert (result is None) == (view == 1 and not required)
    assert calls.captures == (2 if required else 1)
    assert (calls.declined is None) == required
