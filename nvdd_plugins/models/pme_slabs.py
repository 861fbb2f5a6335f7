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

All three steps are one autograd Function (`_Potential`) whose intermediates are locals,
each mesh-sized array freed as soon as the next one is made; the map from the charges at
the stencil points to the potential there is symmetric, so its backward is itself (and
the kernel's gradient for a stress). Forces and stress are derivatives of the owned
partial energies as everywhere else. The net charge is one all-reduce of a number.
docs/long_range.md, "Mesh layouts".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import torch

from nvdd_plugins.models.ewald import background_energies, summed_with_total_charge
from nvdd_plugins.spec import MeshRanks, owned_part

__all__ = ["covering_arc", "flat_indices", "slab_bounds", "slab_energies"]

_KERNEL_POINTS = 1 << 16
"""Kernel values made at once: the kernel's temporaries stay small beside the spectrum."""


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


def _transpose(held: list[torch.Tensor], layout: _Layout, back: bool) -> torch.Tensor:
    """The spectrum in `held` (its only reference, taken out so that it is freed once sent)
    in slabs of the first axis (rank r: planes x[r]..x[r+1], every second-axis frequency)
    redistributed into slabs of the second axis (every first-axis plane), or `back`. What
    is sent along the first axis, and received along it, is contiguous as it is: one copy
    each way, and at most two spectra alive at once."""
    ranks, me = layout.ranks, layout.ranks.rank
    x, y = layout.x, layout.y
    real = torch.view_as_real(held.pop())
    tail = real.shape[2:]
    if back:  # (n0, my y, half, 2) -> (my x, n1, half, 2)
        send = real.reshape(-1)
        send_counts = [(x[q + 1] - x[q]) * real[0].numel() for q in range(ranks.size)]
        shapes = [(x[me + 1] - x[me], y[q + 1] - y[q], *tail) for q in range(ranks.size)]
    else:  # (my x, n1, half, 2) -> (n0, my y, half, 2)
        send_counts = [(y[q + 1] - y[q]) * real[:, 0].numel() for q in range(ranks.size)]
        send = _by_columns(real, y)
        shapes = [(x[q + 1] - x[q], y[me + 1] - y[me], *tail) for q in range(ranks.size)]
    del real
    counts = [math.prod(shape) for shape in shapes]
    got = ranks.all_to_all(send, send_counts, counts)
    del send
    if back:
        parts = [part.view(shape) for part, shape in zip(got.split(counts), shapes, strict=True)]
        return torch.view_as_complex(torch.cat(parts, dim=1))
    return torch.view_as_complex(got.view(x[-1], y[me + 1] - y[me], *tail))


def _by_columns(values: torch.Tensor, bounds: list[int]) -> torch.Tensor:
    """`values` flat, ordered by blocks of its second axis from `bounds` (each block in
    C order)."""
    flat = values.new_empty(values.numel())
    start = 0
    for first, last in itertools.pairwise(bounds):
        part = values[:, first:last]
        flat[start : start + part.numel()].view(part.shape).copy_(part)
        start += part.numel()
    return flat


def _transform_in_place(spectrum: torch.Tensor, dim: int, inverse: bool) -> None:
    """The FFT (unnormalized both ways) along `dim` (0 or 1) of the 3-D `spectrum`, in
    place, a plane at a time: along the middle axis of the whole array torch copies it
    first, and out of place it needs a second array."""
    planes = spectrum.unbind(1 - dim)
    fft, norm = (torch.fft.ifft, "forward") if inverse else (torch.fft.fft, "backward")
    for plane in planes:
        fft(plane, dim=0, norm=norm, out=plane)


def slab_energies(
    pme: Any, positions: torch.Tensor, charges: torch.Tensor, cell: torch.Tensor, ranks: MeshRanks
) -> torch.Tensor:
    """`PME.reciprocal_energies` with the mesh in slabs over `ranks` (module docstring):
    the owned rows' energies (e²/Å), zero on the other rows."""
    inverse = torch.linalg.inv(cell)
    volume = torch.linalg.det(cell).abs()
    owned_charges, owned_positions = owned_part(charges), owned_part(positions)
    points, weights = pme.stencils(owned_positions, inverse)
    mesh = _SlabMesh(pme, points.detach(), ranks)
    at_atoms = _Potential.apply(owned_charges[:, None] * weights, inverse, volume, mesh)
    at_atoms = (at_atoms * weights).sum(dim=-1)
    _, total = summed_with_total_charge(owned_charges.new_zeros(0), owned_charges)
    owned = 0.5 * owned_charges * at_atoms
    owned = owned + background_energies(owned_charges, total, pme.alpha, volume)
    return torch.cat([owned, owned.new_zeros(charges.shape[0] - owned.shape[0])])


class _SlabMesh:
    """This rank's part of the mesh: the box its owned atoms' stencils touch, travelling as
    its values in the order sent (by destination rank), and its slabs; the two halves of
    the convolution between them (`spectrum`, `potential`)."""

    def __init__(self, pme: Any, points: torch.Tensor, ranks: MeshRanks) -> None:
        box = _box(points, pme.mesh)
        self.pme, self.layout = pme, _Layout(pme.mesh, box, ranks)
        sent, self.send_counts = self.layout.sent()
        targets, self.recv_counts = self.layout.received()
        # every box point is sent once: `slot` inverts that permutation
        slot = torch.empty_like(sent)
        slot[sent] = torch.arange(sent.numel())
        del sent
        device = points.device
        self.targets = targets.int().to(device)
        mesh = torch.tensor(pme.mesh, device=device)
        local = (points - box[None, :3, None].to(device)) % mesh[None, :, None]
        # the stencil points (owned, order³) as places in the box's send order
        self.at = slot.to(device)[flat_indices(local, tuple(box[3:].tolist()))]
        self.n_sent = slot.numel()
        me = ranks.rank
        self.rows = slice(self.layout.y[me], self.layout.y[me + 1])

    def kernel_blocks(
        self, inverse: torch.Tensor, volume: torch.Tensor
    ) -> Iterator[tuple[slice, torch.Tensor]]:
        """The Ewald kernel on this rank's slab of the spectrum (n0, my y, half), in blocks
        of first-axis planes: (planes, kernel on them)."""
        n0, (_, _, n2) = self.layout.mesh[0], self.layout.mesh
        per_plane = (self.rows.stop - self.rows.start) * (n2 // 2 + 1)
        step = max(1, _KERNEL_POINTS // max(per_plane, 1))
        for first in range(0, n0, step):
            planes = slice(first, min(first + step, n0))
            yield planes, self.pme.kernel(inverse, volume, self.rows, planes)

    def spectrum(self, values: torch.Tensor) -> torch.Tensor:
        """The half spectrum (n0, my y, half), unnormalized, of `values` (owned, order³)
        spread at the stencil points: into the box, every box into the slabs, FFT."""
        layout, ranks = self.layout, self.layout.ranks
        me, (_, n1, n2) = ranks.rank, layout.mesh
        sent = values.new_zeros(self.n_sent).index_add_(0, self.at.reshape(-1), values.reshape(-1))
        arrived = ranks.all_to_all(sent, self.send_counts, self.recv_counts)
        del sent
        slab = arrived.new_zeros((layout.x[me + 1] - layout.x[me]) * n1 * n2)
        slab.index_add_(0, self.targets, arrived)
        del arrived
        # in a list, its only reference: `_transpose` frees it once sent
        held = [torch.fft.rfft(slab.view(-1, n1, n2), dim=2)]
        del slab
        _transform_in_place(held[0], 1, inverse=False)
        spectrum = _transpose(held, layout, back=False)
        _transform_in_place(spectrum, 0, inverse=False)
        return spectrum

    def potential(
        self, spectrum: list[torch.Tensor], inverse: torch.Tensor, volume: torch.Tensor
    ) -> torch.Tensor:
        """The potential at the stencil points (owned, order³) of the half spectrum in
        `spectrum` (its only reference) times the kernel: the adjoint of `spectrum`."""
        layout, ranks = self.layout, self.layout.ranks
        n2 = layout.mesh[2]
        for planes, kernel in self.kernel_blocks(inverse, volume):
            torch.view_as_real(spectrum[0][planes]).mul_(kernel[..., None])
        del kernel
        _transform_in_place(spectrum[0], 0, inverse=True)
        values = _transpose(spectrum, layout, back=True)
        _transform_in_place(values, 1, inverse=True)
        values = torch.fft.irfft(values, n=n2, dim=2, norm="forward")
        values = values.view(-1).index_select(0, self.targets)
        values = ranks.all_to_all(values, self.recv_counts, self.send_counts)
        return values[self.at]

    def kernel_gradient(self, values: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """d(grad · potential(values))/d kernel: Re(spectrum of values times the conjugate of
        grad's), twice where the half spectrum stands for a frequency and its mirror."""
        charges = torch.view_as_real(self.spectrum(values))
        dot = (charges * torch.view_as_real(self.spectrum(grad))).sum(dim=-1)
        del charges
        n2 = self.layout.mesh[2]
        dot[..., 1 : (n2 + 1) // 2].mul_(2.0)  # all but bin 0 and, for even n2, bin n2/2
        return dot


class _Potential(torch.autograd.Function):
    """`_SlabMesh.spectrum` then `_SlabMesh.potential`: the mesh potential at the owned
    stencil points of the charges `values` spread there, with no mesh array kept between
    forward and backward. The map from values to potential is symmetric (spreading and
    gathering at the same points, each other's transpose; exchanges, each the other's
    adjoint; a convolution with a real, even kernel), so its backward is itself."""

    @staticmethod
    def forward(
        ctx: Any, values: torch.Tensor, inverse: torch.Tensor, volume: torch.Tensor, mesh: _SlabMesh
    ) -> torch.Tensor:
        ctx.mesh = mesh
        ctx.save_for_backward(values, inverse, volume)
        return mesh.potential([mesh.spectrum(values)], inverse, volume)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        values, inverse, volume = ctx.saved_tensors
        mesh = ctx.mesh
        grad_values = grad_inverse = grad_volume = None
        if ctx.needs_input_grad[0]:
            grad_values = _Potential.apply(grad, inverse, volume, mesh)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            # the kernel depends on the cell (a stress): through the kernel's own graph
            if torch.is_grad_enabled():
                raise NotImplementedError("PME slabs: no second derivatives through a stress")
            weight = mesh.kernel_gradient(values.detach(), grad.detach())
            leaves = inverse.detach().requires_grad_(), volume.detach().requires_grad_()
            grad_inverse, grad_volume = torch.zeros_like(inverse), torch.zeros_like(volume)
            with torch.enable_grad():
                for planes, kernel in mesh.kernel_blocks(*leaves):
                    block = torch.autograd.grad(kernel, leaves, weight[planes])
                    grad_inverse, grad_volume = grad_inverse + block[0], grad_volume + block[1]
        return grad_values, grad_inverse, grad_volume, None
