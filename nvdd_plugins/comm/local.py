"""`LocalCommunicator`: the group of one process running alone (no launcher, no peers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from nvdd_plugins.comm.base import Communicator, ReduceOp

__all__ = ["LocalCommunicator"]


class LocalCommunicator(Communicator):
    """One rank: collectives return (a copy of) their input; there is no peer to exchange
    with."""

    rank = 0
    size = 1

    def exchange(
        self,
        sends: Mapping[int, torch.Tensor],
        recv_counts: Mapping[int, int],
        template: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        """Nothing to exchange: a one-rank group has no peers."""
        if sends or recv_counts:
            raise ValueError(f"a one-rank group has no peers, got {sorted({*sends, *recv_counts})}")
        return {}

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """A copy of `tensor`."""
        return tensor.detach().clone()

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """[a copy of `tensor`]."""
        return [tensor.detach().clone()]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """`obj`."""
        return obj

    def barrier(self) -> None:
        """Nothing to wait for."""
