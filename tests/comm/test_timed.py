"""`TimedCommunicator`: the seconds a rank computes, its communication (waiting included)
left out."""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from nvdd_plugins.comm import LocalCommunicator, TimedCommunicator, computing

WAIT = 0.3  # seconds each slow call takes (a rank waiting for its neighbours)
WORK = 0.1


class _SlowCommunicator(LocalCommunicator):
    """One rank whose exchanges and all-reduces take `WAIT` seconds."""

    def exchange(
        self,
        sends: Mapping[int, torch.Tensor],
        recv_counts: Mapping[int, int],
        template: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        time.sleep(WAIT)
        return super().exchange(sends, recv_counts, template)

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        time.sleep(WAIT)
        return super().all_reduce(tensor, op)


def test_computing_leaves_out_the_communication_inside() -> None:
    comm = TimedCommunicator(_SlowCommunicator())
    with computing(comm, torch.device("cpu")):
        time.sleep(WORK)
        comm.exchange({}, {}, torch.empty(0, 3))
        assert torch.equal(comm.all_reduce(torch.ones(2)), torch.ones(2))
    assert comm.communicating >= 2 * WAIT
    seconds = comm.take_computed()
    assert WORK <= seconds < WORK + WAIT  # with the waits it would be >= 0.7 s
    assert comm.computed == 0.0  # taken
    comm.all_reduce(torch.ones(1))  # outside a section: communication, not computing
    assert comm.computed == 0.0 and comm.communicating >= 3 * WAIT


def test_computing_measures_nothing_on_other_communicators() -> None:
    comm = LocalCommunicator()
    with computing(comm, torch.device("cpu")):
        time.sleep(0.01)
    assert not hasattr(comm, "computed")
