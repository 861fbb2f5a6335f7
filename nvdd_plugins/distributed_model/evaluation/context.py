"""`HaloContext`: what op interception needs to know about the current local view."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvdd_plugins.comm import (
    all_reduce_sum,
    copy_to_ghosts,
    copy_to_ghosts_,
    sum_ghosts_into_owners,
)
from nvdd_plugins.distributed_model.evaluation.heat_flux import FluxTaps
from nvdd_plugins.spec import OwnedRows

__all__ = ["HaloContext"]


@dataclass(frozen=True)
class HaloContext:
    """The local layout of one forward: owned rows, ghost rows, then padding (n_rows total).

    `n_rows` never equals the edge count or the number of systems, so a tensor whose
    leading size is `n_rows` is node-indexed. The plan and communicator are reached through
    `slot` (a bound `HaloSlot` number), so a compiled forward does not capture them.

    Attributes:
        n_rows: padded local rows.
        n_owned: owned rows (first).
        owned_mask: (n_rows,) bool.
        slot: the number of the bound `HaloSlot`.
        in_place: refresh the targets of in-place scatters in place (eager: then a wrapper
            that forgets to rebind an in-place scatter is still exact); otherwise return a
            new tensor (compiled forwards, where the rebinding rule applies).
        exchanges: False when a halo exchange moves nothing on this rank (no ghost rows and
            no rows a peer needs); refreshing is then the identity and is skipped (a compiled
            graph then fuses across the scatters). Consistent between peers, so a rank that
            skips is never waited for.
        taps: records every refreshed tensor, for the heat flux (None: not asked for).
    """

    n_rows: int
    n_owned: int
    owned_mask: torch.Tensor
    slot: int
    in_place: bool = True
    exchanges: bool = True
    taps: FluxTaps | None = None

    def is_node_indexed(self, tensor: object) -> bool:
        """Whether `tensor` has one row per local atom."""
        return (
            isinstance(tensor, torch.Tensor) and tensor.dim() > 0 and tensor.shape[0] == self.n_rows
        )

    def mask_unowned(self, tensor: torch.Tensor) -> torch.Tensor:
        """Zero the rows this rank does not own (ghosts and padding)."""
        mask = self.owned_mask.view(-1, *([1] * (tensor.dim() - 1)))
        return torch.where(mask, tensor, torch.zeros((), dtype=tensor.dtype, device=tensor.device))

    def refresh_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Ghost rows of `tensor` take their owners' rows, in place when `in_place` (then
        `tensor` is returned), else in a new tensor. Autograd: ghost gradients go to the
        owners. Only for tensors autograd has not saved (in-place would invalidate them)."""
        if not self.exchanges:
            return tensor
        if self.in_place:
            return self._tapped(copy_to_ghosts_(tensor, self.slot))
        return self._tapped(copy_to_ghosts(tensor, self.slot))

    def refresh(self, tensor: torch.Tensor) -> torch.Tensor:
        """Like `refresh_`, always into a new tensor (safe for any tensor)."""
        if not self.exchanges:
            return tensor
        return self._tapped(copy_to_ghosts(tensor, self.slot))

    def _tapped(self, refreshed: torch.Tensor) -> torch.Tensor:
        return refreshed if self.taps is None else self.taps.tap(refreshed)

    def sum_into_owners(self, tensor: torch.Tensor) -> torch.Tensor:
        """The adjoint of `refresh`: ghost rows added into their owners' rows, then zeroed."""
        if not self.exchanges:
            return tensor
        return sum_ghosts_into_owners(tensor, self.slot)

    def owned_rows(self) -> OwnedRows:
        """This layout as a model sees it through `nvdd_plugins.spec.owned_rows` (with
        `taps`, its refreshes are those of the heat flux too)."""
        taps = self.taps
        if taps is None:
            return OwnedRows(self.n_owned, self.n_rows, self.refresh, self.sum_into_owners)

        def refresh(tensor: torch.Tensor) -> torch.Tensor:
            exchanged = tensor if not self.exchanges else copy_to_ghosts(tensor, self.slot)
            return taps.exchanged(exchanged)

        def refresh_adjoint(grad: torch.Tensor) -> torch.Tensor:
            return self.sum_into_owners(taps.adjoint_of(grad))

        return OwnedRows(self.n_owned, self.n_rows, refresh, refresh_adjoint)

    def refresh_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """`refresh` for a node-indexed tensor; any other tensor is returned as it is."""
        return self.refresh(tensor) if self.is_node_indexed(tensor) else tensor

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (adjoint: the same sum of the gradients)."""
        return all_reduce_sum(tensor, self.slot)
