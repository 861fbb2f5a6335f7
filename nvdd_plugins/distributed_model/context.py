"""`HaloContext`: what op interception needs to know about the current local view."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvdd_plugins.comm import Communicator, HaloPlan

__all__ = ["HaloContext"]


@dataclass(frozen=True)
class HaloContext:
    """The local layout of one forward: owned rows, ghost rows, then padding (n_rows total).

    `n_rows` never equals the edge count or the number of systems, so a tensor whose
    leading size is `n_rows` is node-indexed.
    """

    plan: HaloPlan
    comm: Communicator
    n_rows: int
    owned_mask: torch.Tensor

    @property
    def n_owned(self) -> int:
        """Rows this rank owns."""
        return self.plan.n_owned

    def is_node_indexed(self, tensor: object) -> bool:
        """Whether `tensor` has one row per local atom."""
        return (
            isinstance(tensor, torch.Tensor) and tensor.dim() > 0 and tensor.shape[0] == self.n_rows
        )

    def mask_unowned(self, tensor: torch.Tensor) -> torch.Tensor:
        """Zero the rows this rank does not own (ghosts and padding)."""
        mask = self.owned_mask.view(-1, *([1] * (tensor.dim() - 1)))
        return torch.where(mask, tensor, torch.zeros((), dtype=tensor.dtype, device=tensor.device))
