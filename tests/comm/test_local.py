"""`LocalCommunicator`, the group of a process running alone."""

from __future__ import annotations

import pytest
import torch

from nvdd_plugins.comm import LocalCommunicator, resolve_communicator


def test_collectives_return_their_input() -> None:
    comm = LocalCommunicator()
    tensor = torch.arange(4.0)
    assert comm.rank == 0 and comm.size == 1
    assert torch.equal(comm.all_reduce(tensor, "max"), tensor)
    assert comm.all_reduce(tensor) is not tensor
    assert [t.tolist() for t in comm.all_gather(tensor)] == [tensor.tolist()]
    assert comm.broadcast_object({"a": 1}) == {"a": 1}
    assert comm.exchange({}, {}, template=torch.empty(0, 3)) == {}
    comm.barrier()


def test_a_peer_is_refused() -> None:
    with pytest.raises(ValueError, match="no peers"):
        LocalCommunicator().exchange({1: torch.ones(2, 3)}, {}, template=torch.empty(0, 3))


def test_no_launcher_resolves_to_a_local_communicator() -> None:
    assert isinstance(resolve_communicator(None), LocalCommunicator)
