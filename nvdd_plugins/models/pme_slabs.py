"""PME's mesh distributed over the ranks in slabs, for meshes too large to replicate.

Rank r holds the planes [a_r, a_{r+1}) of the first mesh axis (a slab, about 1/P of the
mesh) and, for a moment, the box of mesh points its owned atoms' splines touch:

1. each rank spreads its owned charges onto its box and sends each plane of the box to
   the plane's slab owner, which adds it into its slab (one all-to-all);
2. the FFT runs in slabs: along the last two axes on the slab, an all-to-all transposes
   the spectrum into slabs of the second axis, then along the first axis; times the Ewald
   kernel of those frequencies; the inverse in reverse order (two more all-to-alls);
3. each slab owner sends the potential on each rank's box back (the adjoint of 1), and
   each rank interpolates it at its owned atoms.

Every step is differentiable (the all-to-alls' backward sends gradients back), so forces
and stress are derivatives of the owned partial energies as everywhere else. The net
charge is one all-reduce of a number. docs/long_range.md, "Mesh layouts".
"""

from __future__ import annotations

import math
from typing import Any

import torch

from nvdd_plugins.models.ewald import background_energies, summed_with_total_charge
from nvdd_plugins.spec import MeshRanks, owned_part

__all__ = ["covering_arc", "flat_indices", "slab_bounds", "slab_energies"]


def flat_indices(points: torch.Tensor, sizes: tuple[int, int, int]) -> torch.Tensor:
    """(n, order³) flat indices of the stencil `points` (n, 3, order) in a C-ordered box of
    `sizes` (the whole mesh, or a part of it in its own coordinates)."""
    s = torch.tensor(sizes, device=points.device)
    flat = (points[:, 0, :, None] * s[1] + points[:, 1, None, :]) * s[2]
    flat = flat[:, :, :, None] + points[:, 2, None, None, :]
    return flat.reshape(points.shape[0], points.shape[2] ** 3)


def slab_bounds(n: int, size: int) -> list[int]:
    """The first plane of each of `size` balanced slabs of `n` planes, then `n`."""
    return [r * n // size for r in range(size + 1)]


def covering_arc(points: torch.Tensor, n: int) -> tuple[int, int]:
    """(first, length) of the shortest run of mesh planes (periodic, of `n`) holding every
    plane in `points`; (0, 0) for none, (0, n) when the run would wrap onto itself."""
    used = torch.unique(points.reshape(-1).cpu())
    if used.numel() == 0:
        return 0, 0
    gaps = torch.diff(used, append=used[:1] + n) - 1  # empty planes after each used one
    widest = int(torch.argmax(gaps))
    first, length = int(used[(widest + 1) % used.numel()]), n - int(gaps[widest])
    return (0, n) if length >= n else (first, length)


class _Layout:
    """Which values go where: the boxes of every rank (from an all-gather of their corners
    and sizes) and the slabs of both mesh axes."""

    def __init__(self, mesh: tuple[int, int, int], box: torch.Tensor, ranks: MeshRanks) -> None:
        self.mesh, self.ranks = mesh, ranks
        # every rank's box: [o0, o1, o2, l0, l1, l2]
        self.boxes = [b[0].tolist() for b in ranks.all_gather(box[None])]
        self.x = slab_bounds(mesh[0], ranks.size)
        self.y = slab_bounds(mesh[1], ranks.size)

    def planes_of(self, box: list[int], rank: int) -> list[int]:
        """The planes (box coordinates) of `box` that lie in `rank`'s slab, increasing."""
        lo, hi = self.x[rank], self.x[rank + 1]
        return [i for i in range(box[3]) if lo <= (box[0] + i) % self.mesh[0] < hi]

    def sent(self) -> tuple[torch.Tensor, list[int]]:
        """The flat box indices this rank sends, by destination rank, and their counts."""
        box = self.boxes[self.ranks.rank]
        in_plane = torch.arange(box[4] * box[5])
        order, counts = [], []
        for q in range(self.ranks.size):
            planes = torch.tensor(self.planes_of(box, q), dtype=torch.long)
            order.append((planes[:, None] * in_plane.numel() + in_plane).reshape(-1))
            counts.append(planes.numel() * in_plane.numel())
        return torch.cat(order), counts

    def received(self) -> tuple[torch.Tensor, list[int]]:
        """Where in this rank's slab the values from every rank go, and their counts."""
        me, (_, n1, n2) = self.ranks.rank, self.mesh
        lo = self.x[me]
        targets, counts = [], []
        for box in self.boxes:
            planes = self.planes_of(box, me)
            y = (box[1] + torch.arange(box[4])) % n1
            z = (box[2] + torch.arange(box[5])) % n2
            in_plane = (y[:, None] * n2 + z[None, :]).reshape(-1)
            for i in planes:
                targets.append(((box[0] + i) % self.mesh[0] - lo) * n1 * n2 + in_plane)
            counts.append(len(planes) * box[4] * box[5])
        flat = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long)
        return flat, counts


def _box(points: torch.Tensor, mesh: tuple[int, int, int]) -> torch.Tensor:
    """[o0, o1, o2, l0, l1, l2]: the corner and sizes of the box of mesh points the
    stencil `points` (n, 3, order) touch."""
    arcs = [covering_arc(points[:, axis], n) for axis, n in enumerate(mesh)]
    return torch.tensor([a[0] for a in arcs] + [a[1] for a in arcs], dtype=torch.long)


def _transpose(spectrum: torch.Tensor, layout: _Layout, back: bool) -> torch.Tensor:
    """The spectrum in slabs of the first axis (rank r: planes x[r]..x[r+1], every second-
    axis frequency) redistributed into slabs of the second axis (every first-axis plane),
    or `back`. What is sent along the first axis, and received along it, is contiguous as
    it is: one copy each way instead of two."""
    ranks, me = layout.ranks, layout.ranks.rank
    x, y = layout.x, layout.y
    real = torch.view_as_real(spectrum)
    if back:  # (n0, my y, half, 2) -> (my x, n1, half, 2)
        send = real.reshape(-1)
        send_counts = [(x[q + 1] - x[q]) * real[0].numel() for q in range(ranks.size)]
        shapes = [(x[me + 1] - x[me], y[q + 1] - y[q], *real.shape[2:]) for q in range(ranks.size)]
    else:  # (my x, n1, half, 2) -> (n0, my y, half, 2)
        send_counts = [(y[q + 1] - y[q]) * real[:, 0].numel() for q in range(ranks.size)]
        send = real.new_empty(real.numel())
        for block, q in zip(send.split(send_counts), range(ranks.size), strict=True):
            part = real[:, y[q] : y[q + 1]]
            block.view(part.shape).copy_(part)
        shapes = [(x[q + 1] - x[q], y[me + 1] - y[me], *real.shape[2:]) for q in range(ranks.size)]
    counts = [math.prod(shape) for shape in shapes]
    got = ranks.all_to_all(send, send_counts, counts)
    del send
    if back:
        parts = [part.reshape(shape) for part, shape in zip(got.split(counts), shapes, strict=True)]
        return torch.view_as_complex(torch.cat(parts, dim=1))
    return torch.view_as_complex(got.reshape(x[-1], y[me + 1] - y[me], *real.shape[2:]))


class _Transposed(torch.autograd.Function):
    """`_transpose` as a differentiable operation that saves nothing: a permutation of the
    values over the ranks, whose adjoint is its inverse."""

    @staticmethod
    def forward(ctx: Any, spectrum: torch.Tensor, layout: _Layout, back: bool) -> torch.Tensor:
        ctx.layout, ctx.back = layout, back
        return _transpose(spectrum, layout, back)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return _Transposed.apply(grad, ctx.layout, not ctx.back), None, None


class _HalfSpectrum(torch.autograd.Function):
    """`torch.fft.rfft` along the last axis, whose backward allocates no full spectrum."""

    @staticmethod
    def forward(ctx: Any, values: torch.Tensor) -> torch.Tensor:
        ctx.n = values.shape[-1]
        return torch.fft.rfft(values, dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        # the adjoint is irfft with the bins between 0 and n/2 halved (irfft counts each of
        # them twice, for its conjugate): half of irfft plus half of bins 0 and n/2
        values = torch.fft.irfft(grad, n=ctx.n, dim=-1, norm="forward")
        values.add_(grad.real[..., :1])
        if ctx.n % 2 == 0:
            values[..., 0::2].add_(grad.real[..., -1:])
            values[..., 1::2].sub_(grad.real[..., -1:])
        return values.mul_(0.5)


def slab_energies(
    pme: Any, positions: torch.Tensor, charges: torch.Tensor, cell: torch.Tensor, ranks: MeshRanks
) -> torch.Tensor:
    """`PME.reciprocal_energies` with the mesh in slabs over `ranks` (module docstring):
    the owned rows' energies (e²/Å), zero on the other rows."""
    inverse = torch.linalg.inv(cell)
    volume = torch.linalg.det(cell).abs()
    owned_charges, owned_positions = owned_part(charges), owned_part(positions)
    points, weights = pme.stencils(owned_positions, inverse)
    box = _box(points.detach(), pme.mesh)
    routes = _Routes(_Layout(pme.mesh, box, ranks), points.device)
    mesh = torch.tensor(pme.mesh, device=points.device)
    local = (points - box[None, :3, None].to(points.device)) % mesh[None, :, None]
    # the box is never held: charges are spread, and the potential read, in send order
    at_sent = routes.slot[flat_indices(local, tuple(box[3:].tolist()))]  # (owned, order³)
    values = owned_charges[:, None] * weights
    # a temporary, not a name: `_convolved` frees the slab once it is transformed
    potential = _convolved(
        routes.spread_to_slab(values, at_sent), pme, routes.layout, inverse, volume
    )
    at_atoms = _Exchanged.apply(potential, routes, False).reshape(-1)[at_sent]  # no box kept
    at_atoms = (at_atoms * weights).sum(dim=-1)
    _, total = summed_with_total_charge(owned_charges.new_zeros(0), owned_charges)
    owned = 0.5 * owned_charges * at_atoms
    owned = owned + background_energies(owned_charges, total, pme.alpha, volume)
    return torch.cat([owned, owned.new_zeros(charges.shape[0] - owned.shape[0])])


class _Routes:
    """The exchange between the boxes and the slabs, both ways (each other's adjoint). A
    box travels as its values in the order sent (by destination rank)."""

    def __init__(self, layout: _Layout, device: torch.device) -> None:
        self.layout = layout
        sent, self.send_counts = layout.sent()
        targets, self.recv_counts = layout.received()
        # every box point is sent once: `slot` inverts that permutation
        slot = torch.empty_like(sent)
        slot[sent] = torch.arange(sent.numel())
        self.slot, self.targets = slot.int().to(device), targets.int().to(device)
        me = layout.ranks.rank
        self.n_slab = (layout.x[me + 1] - layout.x[me]) * layout.mesh[1] * layout.mesh[2]

    def spread_to_slab(self, values: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """`values` (n, k) added at the indices `at` (n, k) of this rank's box in send order,
        then every rank's box into this rank's slab (1, points); differentiable."""
        # leading size 1: mesh arrays are never taken for per-atom tensors by the interception
        sent = values.new_zeros(1, self.slot.numel())
        added = sent.index_add_(1, at.reshape(-1), values.reshape(1, -1))
        return _Exchanged.apply(added, self, True)

    def to_slab(self, sent: torch.Tensor) -> torch.Tensor:
        """The charges of every rank's box (1, points in send order), added into this
        rank's slab (1, points)."""
        ranks = self.layout.ranks
        arrived = ranks.all_to_all(sent[0], self.send_counts, self.recv_counts)
        return sent.new_zeros(1, self.n_slab).index_add_(1, self.targets, arrived[None])

    def to_box(self, potential: torch.Tensor) -> torch.Tensor:
        """The potential on this rank's box (1, points in send order) from the slabs."""
        ranks = self.layout.ranks
        values = potential.index_select(1, self.targets)[0]
        return ranks.all_to_all(values, self.recv_counts, self.send_counts)[None]


class _Exchanged(torch.autograd.Function):
    """`_Routes.to_slab` (`to_slab`) or `_Routes.to_box`, differentiable without saved
    tensors: each direction is the other's adjoint."""

    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, routes: _Routes, to_slab: bool) -> torch.Tensor:
        ctx.routes, ctx.to_slab = routes, to_slab
        return routes.to_slab(values) if to_slab else routes.to_box(values)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return _Exchanged.apply(grad, ctx.routes, not ctx.to_slab), None, None


def _convolved(
    slab: torch.Tensor, pme: Any, layout: _Layout, inverse: torch.Tensor, volume: torch.Tensor
) -> torch.Tensor:
    """The potential on this rank's slab (1, points) of the charges on it: the distributed
    FFT, times the kernel, and back (linear steps: their backward needs no input)."""
    me, (_, n1, n2) = layout.ranks.rank, layout.mesh
    # one step a statement: each input is dropped as soon as the next step returns
    spectrum = _HalfSpectrum.apply(slab.reshape(layout.x[me + 1] - layout.x[me], n1, n2))
    del slab
    spectrum = torch.fft.fft(spectrum, dim=1)
    spectrum = _Transposed.apply(spectrum, layout, False)
    spectrum = torch.fft.fft(spectrum, dim=0)
    kernel = pme.kernel(inverse, volume, slice(layout.y[me], layout.y[me + 1]))
    # times the real kernel as pairs of reals: no complex copy of the kernel
    spectrum = torch.view_as_complex(torch.view_as_real(spectrum) * kernel[..., None])
    del kernel
    spectrum = torch.fft.ifft(spectrum, dim=0, norm="forward")
    spectrum = _Transposed.apply(spectrum, layout, True)
    spectrum = torch.fft.ifft(spectrum, dim=1, norm="forward")
    return torch.fft.irfft(spectrum, n=n2, dim=2, norm="forward").reshape(1, -1)
