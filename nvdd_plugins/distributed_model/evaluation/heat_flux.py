"""Heat-flux tensors of one rank's view, exact across the per-layer halo refresh.

The potential heat flux is sum_j W_j v_j with W_j = sum_i sum_{j'} (r_i - r_j') (x)
dU_i/dr_j' over the unfolded system (j' the images of atom j; `nvdd_plugins.models.
heat_flux`). A rank's rows are explicit images (ghosts at their periodic images, no pair
wrapping across a periodic face), so within a rank every row has one site, its position.
What reaches a row's gradient from another rank's energies came through a refresh: a ghost
row g of an aggregation holds its owner's row, computed on the owner's rank around a site
that differs from g's by a lattice vector T_g. With the adjoint a_g of the total energy at
g (from the energy's backward), the exact tensors of this rank's rows are

    W_k = d(Phi - Psi)/dr_k - r_k (x) dE/dr_k,
    Phi = sum_{i owned} r_i U_i,   Psi = sum_refreshes sum_{ghosts g} T_g <a_g, h_g>,

h_g the refreshed row: Psi carries each contribution's image shift through the refresh
(its gradient reaches the owners through the refresh's own backward). Without Psi, W is
off by lattice vectors wherever a contribution crossed a refresh from a periodic image
(docs/heat_flux.md derives it). `FluxTaps` records the refreshes of one forward, the
adjoints at them and the sites' offsets; `tensors` takes the three backward passes of
Phi - Psi. A refresh inside a model's own autograd function (MACE's owned-rows exchange),
which autograd does not record, gets the same term in its backward instead (`adjoint_of`).
Ghost rows' tensors are owed to their owners, as per-atom virials are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from nvdd_plugins.comm import Communicator, fill_ghosts_
from nvdd_plugins.distributed_model.rows.view import HaloView
from nvdd_plugins.errors import DistributionRuleError

__all__ = ["FluxTaps", "image_terms"]


class _Tap(torch.autograd.Function):
    """The identity on a refreshed tensor (in place), whose backward hands the gradient it
    passes on to the `FluxTaps` that recorded it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, taps: FluxTaps, index: int) -> torch.Tensor:
        ctx.taps, ctx.index = taps, index
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ctx.taps.received(ctx.index, grad)
        return grad, None, None


class FluxTaps:
    """The refreshes of one forward on a view, for its heat-flux tensors.

    Args:
        rows: (n_rows, 3) every row's position as the model sees it (the tensor forces are
            taken through), requiring grad.
        offsets: (n_rows, 3) Å, each ghost row's site minus its owner's site (a lattice
            vector), zero on owned and padding rows.
        n_owned: owned rows (first).
        centre: (3,) Å, the same point on every rank; sites are taken relative to it, which
            changes nothing but rounding.
    """

    def __init__(
        self, rows: torch.Tensor, offsets: torch.Tensor, n_owned: int, centre: torch.Tensor
    ) -> None:
        self.rows, self.offsets, self.n_owned, self.centre = rows, offsets, n_owned, centre
        self._tapped: list[tuple[torch.Tensor, int]] = []  # refreshed tensor, its version
        self._adjoints: dict[int, torch.Tensor] = {}
        self._recording = False
        # refreshes inside a model's own autograd function (no graph to tap): their
        # backward brings the adjoint, and the image shift is applied there (`adjoint_of`)
        self._exchanges = 0
        self._pending = 0  # of the backward under way, counted down (reverse order)
        self._exchange_adjoints: dict[int, torch.Tensor] = {}
        self._axis: int | None = None  # the component whose backward is under way

    @classmethod
    def of(
        cls, view: HaloView, rows: torch.Tensor, cell: torch.Tensor, comm: Communicator
    ) -> FluxTaps:
        """The taps of a forward on `view` with rows at `rows` in `cell` (3, 3) (collective:
        one exchange of the sites to the ghost rows)."""
        sites = rows.detach()
        offsets = torch.zeros_like(sites)
        if view.plan.exchanges:
            local = sites[: view.n_local]
            owners = fill_ghosts_(local.clone(), view.plan, comm)
            offsets[: view.n_local] = local - owners
        return cls(rows, offsets, view.n_owned, 0.5 * cell.detach().sum(dim=0))

    def tap(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` (a refreshed node-indexed tensor) recorded; returned as it is."""
        if not (torch.is_grad_enabled() and tensor.requires_grad):
            return tensor
        index = len(self._tapped)
        tensor = _Tap.apply(tensor, self, index)
        self._tapped.append((tensor, tensor._version))
        return tensor

    def exchanged(self, refreshed: torch.Tensor) -> torch.Tensor:
        """A refresh a model asked for (`OwnedRows.refresh`): tapped where autograd records
        it, else counted for its backward (`adjoint_of`)."""
        if torch.is_grad_enabled() and refreshed.requires_grad:
            return self.tap(refreshed)
        self._exchanges += 1
        return refreshed

    def adjoint_of(self, grad: torch.Tensor) -> torch.Tensor:
        """The gradient at a counted refresh's output (`OwnedRows.refresh_adjoint`, in the
        model's backward, latest refresh first) before it goes to the owners: kept in the
        energy's backward; in the backward of component a, with -T_a a_g added on ghost
        rows (the image shift that `image_terms` carries for tapped refreshes)."""
        self._pending -= 1
        if self._recording:
            self._exchange_adjoints[self._pending] = grad.detach().clone()
        elif self._axis is not None:
            shift = self.offsets[:, self._axis].view(-1, *([1] * (grad.dim() - 1)))
            grad = grad - shift.to(grad.dtype) * self._exchange_adjoints[self._pending]
        return grad

    def received(self, index: int, grad: torch.Tensor) -> None:
        """The gradient at tapped tensor `index` during a backward (kept while recording)."""
        if self._recording:
            self._adjoints[index] = grad.detach()

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Within: a backward's gradients at the tapped tensors are kept (the energy's)."""
        self._recording, self._pending = True, self._exchanges
        try:
            yield
        finally:
            self._recording = False

    def tensors(self, energies: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        """(n_rows, 3, 3) W of every row, eV, from the owned `energies` (with their graph) and
        `gradient` = dE/d rows of the recorded backward (collective: three backwards)."""
        sites = self.rows.detach() - self.centre
        phi = sites[: self.n_owned].T @ energies
        target = phi - image_terms(self)
        moments = []
        for axis in range(3):
            self._axis, self._pending = axis, self._exchanges
            try:
                (moment,) = torch.autograd.grad(
                    target[axis], self.rows, retain_graph=axis < 2, allow_unused=True
                )
            finally:
                self._axis = None
            moments.append(torch.zeros_like(sites) if moment is None else moment)
        return torch.stack(moments, dim=1) - sites.unsqueeze(2) * gradient.unsqueeze(1)

    def adjoint_weighted_rows(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Each tapped tensor the energy's backward reached, as (n_rows, -1) with its adjoint
        there; a clear error when the model changed it in place after its refresh."""
        for index, (tensor, version) in enumerate(self._tapped):
            adjoint = self._adjoints.get(index)
            if adjoint is None:
                continue
            if tensor._version != version:
                raise DistributionRuleError(
                    "the heat flux needs the result of every aggregation onto atoms as it "
                    "was refreshed, but the model changed it in place afterwards: write "
                    "x = x + y instead of x += y after a scatter"
                )
            n_rows = tensor.shape[0]
            yield tensor.reshape(n_rows, -1), adjoint.reshape(n_rows, -1)


def image_terms(taps: FluxTaps) -> torch.Tensor:
    """Psi (3,) = sum over the tapped refreshes and their ghost rows g of T_g <a_g, h_g>:
    the image shifts of what crossed a refresh (zero without ghosts)."""
    psi = taps.offsets.new_zeros(3)
    for rows, adjoint in taps.adjoint_weighted_rows():
        psi = psi + taps.offsets.T @ (adjoint * rows).sum(dim=1)
    return psi
