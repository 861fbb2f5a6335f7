"""Smooth particle-mesh Ewald (Essmann et al. 1995) of point charges: the reciprocal part of
the Ewald sum on a charge mesh, as per-atom energies (e²/Å), distributable unchanged.

Each atom's charge is spread onto the mesh with cardinal B-splines of order `order`; the
mesh is convolved with the Ewald kernel by FFT, and the potential is interpolated back
with the same splines. Each rank spreads the charges of the atoms it owns (`owned_part`);
either one all-reduce of the mesh (`summed_over_ranks`) completes it and every rank has the
potential at its own rows, or the mesh stays distributed in slabs (`pme_slabs`).
docs/long_range.md gives the formulas and the costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from nvdd_plugins.models.ewald import background_energies, summed_with_total_charge
from nvdd_plugins.models.pme_slabs import flat_indices, slab_energies
from nvdd_plugins.spec import mesh_ranks, owned_part

__all__ = ["PME", "SLAB_MESH_POINTS", "bspline_weights"]

SLAB_MESH_POINTS = 32768
"""Mesh points per rank from which `PME(layout="auto")` keeps the mesh in slabs (below,
one all-reduce of the whole mesh is faster: docs/long_range.md, "Mesh layouts")."""


def bspline_weights(t: torch.Tensor, order: int) -> torch.Tensor:
    """(..., order) cardinal B-spline values M_order(t + j), j = 0 .. order-1, for fractional
    offsets `t` in [0, 1) (differentiable in `t`)."""
    weights = torch.stack([t, 1.0 - t], dim=-1)  # M_2(t), M_2(t + 1)
    for n in range(3, order + 1):
        j = torch.arange(n, dtype=t.dtype, device=t.device)
        x = t.unsqueeze(-1) + j  # M_n(x) = x M_{n-1}(x) + (n - x) M_{n-1}(x - 1), / (n - 1)
        pad = weights.new_zeros(*weights.shape[:-1], 1)
        at_x, at_x_minus_1 = torch.cat([weights, pad], -1), torch.cat([pad, weights], -1)
        weights = (x * at_x + (n - x) * at_x_minus_1) / (n - 1)
    return weights


def _spline_moduli(size: int, order: int, like: torch.Tensor) -> torch.Tensor:
    """(size,) |b(m)|² of SPME along one mesh axis, for m in FFT order."""
    values = bspline_weights(like.new_zeros(()), order)[1:]  # M(1) .. M(order - 1)
    m = torch.fft.fftfreq(size, 1.0 / size, dtype=like.dtype, device=like.device)
    j = torch.arange(order - 1, dtype=like.dtype, device=like.device)
    angle = 2.0 * math.pi * m[:, None] * j / size
    denominator = (values * angle.cos()).sum(-1).square() + (values * angle.sin()).sum(-1).square()
    return 1.0 / denominator


@dataclass(frozen=True)
class PME:
    """Smooth particle-mesh Ewald: splitting parameter `alpha` (1/Å), `mesh` points along
    the three cell vectors, B-spline `order`; the real-space cutoff is the model's.
    `scheme` "spme" is Essmann's (the B-spline deconvolution |b(m)|², even orders >= 4);
    "nvalchemiops" the PME of nvalchemi-toolkit-ops 0.5, which aimnet's calculator uses
    (with order 5): deconvolution by the splines' transform (sinc(m1/n1) sinc(m2/n2)
    sinc(m3/n3))^(2 order), stencil weights <= 1e-8 left out of the sums (not of their
    gradients), orders 2 to 6. `layout` says how ranks hold the mesh in a distributed
    forward: "whole" (each rank spreads its atoms onto a whole mesh, one all-reduce sums
    them, every rank transforms it), "slabs" (each rank holds about 1/P of it: the parts its
    atoms touch and a slab of planes; the FFT runs distributed, with all-to-alls: see
    `pme_slabs`) or "auto" (slabs from `SLAB_MESH_POINTS` points per rank). `for_cell`
    sizes the mesh by a spacing."""

    alpha: float
    mesh: tuple[int, int, int]
    order: int = 6
    scheme: str = "spme"
    layout: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "mesh", tuple(int(n) for n in self.mesh))
        if not self.alpha > 0:
            raise ValueError(f"alpha must be > 0 (1/Å), got {self.alpha!r}")
        if self.scheme not in ("spme", "nvalchemiops"):
            raise ValueError(f"scheme must be 'spme' or 'nvalchemiops', got {self.scheme!r}")
        if self.scheme == "spme" and (self.order < 4 or self.order % 2):
            raise ValueError(f"SPME's B-spline order must be even and >= 4, got {self.order!r}")
        if self.scheme == "nvalchemiops" and not 2 <= self.order <= 6:
            raise ValueError(f"nvalchemiops' PME takes B-spline orders 2 to 6, got {self.order!r}")
        if self.layout not in ("auto", "whole", "slabs"):
            raise ValueError(f"layout must be 'auto', 'whole' or 'slabs', got {self.layout!r}")
        if len(self.mesh) != 3 or min(self.mesh) < self.order:
            raise ValueError(f"mesh needs 3 sizes of at least order={self.order}, got {self.mesh}")

    @classmethod
    def for_cell(cls, alpha: float, cell: torch.Tensor, spacing: float, order: int = 6) -> PME:
        """A mesh of even sizes whose points are at most `spacing` (Å) apart along each
        vector of the (3, 3) `cell` (Å). docs/long_range.md lists the accuracy of some
        spacings and orders against Ewald."""
        lengths = torch.linalg.vector_norm(torch.as_tensor(cell, dtype=torch.float64), dim=-1)
        sizes = [2 * math.ceil(float(a) / (2.0 * spacing)) for a in lengths]
        return cls(alpha=alpha, mesh=tuple(max(n, order) for n in sizes), order=order)

    def reciprocal_energies(
        self, positions: torch.Tensor, charges: torch.Tensor, cell: torch.Tensor
    ) -> torch.Tensor:
        """Per-atom reciprocal-space energies plus the background term (e²/Å) of every row
        of `positions` (n, 3) with `charges` (n,) in the periodic `cell` (3, 3). In a
        distributed forward whose mesh `layout` is "slabs" the mesh stays distributed and
        only the owned rows get their energies (the others, never kept, are zero)."""
        ranks = mesh_ranks()
        if ranks is not None and self.uses_slabs(ranks.size):
            return slab_energies(self, positions, charges, cell, ranks)
        inverse = torch.linalg.inv(cell)
        volume = torch.linalg.det(cell).abs()
        owned_charges = owned_part(charges)
        points, weights = self.stencils(owned_part(positions), inverse)
        n_points = math.prod(self.mesh)
        # leading size 1: a mesh is never taken for a per-atom tensor by the interception
        partial = charges.new_zeros(1, n_points).index_add_(
            1,
            flat_indices(points, self.mesh).reshape(-1),
            (owned_charges[:, None] * weights).reshape(1, -1),
        )
        mesh, total = summed_with_total_charge(partial, owned_charges)
        spectrum = torch.fft.rfftn(mesh.reshape(self.mesh))
        potential = torch.fft.irfftn(
            self.kernel(inverse, volume) * spectrum, s=self.mesh, norm="forward"
        )
        points, weights = self.stencils(positions, inverse)
        at_atoms = (potential.reshape(-1)[flat_indices(points, self.mesh)] * weights).sum(dim=-1)
        return 0.5 * charges * at_atoms + background_energies(charges, total, self.alpha, volume)

    def uses_slabs(self, n_ranks: int) -> bool:
        """Whether `n_ranks` ranks keep the mesh in slabs (`layout`, "auto": from
        `SLAB_MESH_POINTS` points per rank up, and a slab plane per rank on both axes)."""
        fits = n_ranks <= min(self.mesh[0], self.mesh[1])
        if self.layout == "auto":
            return fits and math.prod(self.mesh) >= SLAB_MESH_POINTS * n_ranks
        return self.layout == "slabs" and fits

    def stencils(
        self, positions: torch.Tensor, inverse: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The mesh points each row of `positions` touches along each axis, (n, 3, order),
        wrapped into the mesh, and its spline weights at the order³ points, (n, order³)."""
        p = self.order
        # centred splines (a charge at mesh coordinate s weighs point g by M(s - g + p/2)):
        # for even orders a roll of the mesh by p/2, which leaves the energies as they are
        scaled = positions @ inverse * positions.new_tensor(self.mesh) + 0.5 * p
        base = scaled.detach().floor()
        weights = bspline_weights(scaled - base, p)  # (n, 3, p): point base - j gets M(t + j)
        steps = torch.arange(p, device=positions.device)
        sizes = torch.tensor(self.mesh, device=positions.device)
        points = (base.long()[:, :, None] - steps) % sizes[:, None]  # (n, 3, p)
        product = weights[:, 0, :, None, None] * weights[:, 1, None, :, None]
        product = (product * weights[:, 2, None, None, :]).reshape(-1, p**3)
        if self.scheme == "nvalchemiops":  # its kernels skip the value, not the gradient
            product = torch.where(product > 1e-8, product, product - product.detach())
        return points, product

    def kernel(
        self,
        inverse: torch.Tensor,
        volume: torch.Tensor,
        rows: slice = slice(None),
        planes: slice = slice(None),
    ) -> torch.Tensor:
        """The Ewald kernel 4 pi exp(-k² / 4 alpha²) / (V k²) divided by the splines'
        deconvolution on the half spectrum of `torch.fft.rfftn` (zero at k = 0), for the
        frequencies `planes` of the first mesh axis and `rows` of the second."""
        n1, n2, n3 = self.mesh
        like = volume
        axes = [
            torch.fft.fftfreq(n1, 1.0 / n1, dtype=like.dtype, device=like.device),
            torch.fft.fftfreq(n2, 1.0 / n2, dtype=like.dtype, device=like.device),
            torch.fft.rfftfreq(n3, 1.0 / n3, dtype=like.dtype, device=like.device),
        ]
        # k² = m^T G m, G = B B^T with B = 2 pi inverse^T: broadcast over the three axes
        m = [axes[0][planes, None, None], axes[1][rows][None, :, None], axes[2][None, None, :]]
        metric = (2.0 * math.pi) ** 2 * inverse.T @ inverse
        k2 = sum(metric[a, a] * m[a].square() for a in range(3))
        k2 = k2 + sum(2.0 * metric[a, b] * m[a] * m[b] for a, b in ((0, 1), (0, 2), (1, 2)))
        origin = (m[0] == 0) & (m[1] == 0) & (m[2] == 0)
        k2 = torch.where(origin, 1.0, k2)
        kernel = 4.0 * math.pi / volume * torch.exp(-k2 / (4.0 * self.alpha**2)) / k2
        if self.scheme == "nvalchemiops":
            sincs = [torch.special.sinc(axis / n) for axis, n in zip(axes, self.mesh, strict=True)]
            product = sincs[0][planes, None, None] * sincs[1][rows][None, :, None]
            product = product * sincs[2][None, None, :]
            kernel = kernel / product.pow(self.order).clamp_min(1e-10).square()
        else:
            moduli = [_spline_moduli(n, self.order, like) for n in self.mesh]
            kernel = kernel * moduli[0][planes, None, None] * moduli[1][rows][None, :, None]
            kernel = kernel * moduli[2][: n3 // 2 + 1][None, None, :]
        return torch.where(origin, 0.0, kernel)
