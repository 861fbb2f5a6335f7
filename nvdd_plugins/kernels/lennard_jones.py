"""Lennard-Jones energies, forces and virials as one opaque custom op, `nvdd::lennard_jones`.

The op computes forces directly (no autograd), like a fused GPU kernel would; distributing it
therefore needs an adapter (`SPEC_LJ_HALO`), which is what this kernel exists to exercise.
"""

from __future__ import annotations

import torch

__all__ = ["lennard_jones"]


def _pair_terms(
    positions: torch.Tensor,
    edge_index: torch.Tensor,
    shifts: torch.Tensor,
    sigma: float,
    cutoff: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pair vectors, the inside-cutoff mask, r^2 (1 outside, to stay finite) and (sigma/r)^6."""
    rij = positions[edge_index[1]] - positions[edge_index[0]] + shifts
    r2 = (rij * rij).sum(-1)
    inside = r2 < cutoff * cutoff
    r2 = torch.where(inside, r2, torch.ones_like(r2))
    return rij, inside, r2, (sigma * sigma / r2) ** 3


@torch.library.custom_op("nvdd::lennard_jones", mutates_args=())
def lennard_jones(
    positions: torch.Tensor,
    edge_index: torch.Tensor,
    shifts: torch.Tensor,
    epsilon: float,
    sigma: float,
    cutoff: float,
    shift_energy: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-atom LJ energies (eV), forces (eV/Å) and virials (eV) from a full neighbour list.

    `edge_index` rows are (i, j) with r_ij = x[j] - x[i] + shifts; each unordered pair must
    appear in both directions. Pairs at r >= cutoff contribute nothing. Energies take half of
    each pair term; `virials[i] = 1/2 sum_j phi'(r) r_ij (x) r_ij / r`, so
    `stress = virials.sum(0) / volume`. Forces on atom i use only edges centred on i, so they
    are complete for any atom whose neighbours are all present.
    """
    i = edge_index[0]
    rij, inside, r2, c6 = _pair_terms(positions, edge_index, shifts, sigma, cutoff)
    c12 = c6 * c6
    offset = (
        4.0 * epsilon * ((sigma / cutoff) ** 12 - (sigma / cutoff) ** 6) if shift_energy else 0.0
    )
    pair_energy = torch.where(inside, 4.0 * epsilon * (c12 - c6) - offset, torch.zeros_like(r2))
    dphi_over_r = torch.where(inside, -24.0 * epsilon * (2.0 * c12 - c6) / r2, torch.zeros_like(r2))
    pair_force = dphi_over_r.unsqueeze(-1) * rij
    n = positions.shape[0]
    energies = positions.new_zeros(n).index_add_(0, i, 0.5 * pair_energy)
    forces = positions.new_zeros(n, 3).index_add_(0, i, pair_force)
    pair_virial = 0.5 * pair_force.unsqueeze(-1) * rij.unsqueeze(-2)
    virials = positions.new_zeros(n, 3, 3).index_add_(0, i, pair_virial)
    return energies, forces, virials


@lennard_jones.register_fake
def _(positions, edge_index, shifts, epsilon, sigma, cutoff, shift_energy):
    n = positions.shape[0]
    return positions.new_empty(n), positions.new_empty(n, 3), positions.new_empty(n, 3, 3)


def _setup_context(ctx, inputs, output) -> None:
    positions, edge_index, shifts, epsilon, sigma, cutoff, _ = inputs
    ctx.save_for_backward(positions, edge_index, shifts)
    ctx.parameters = (epsilon, sigma, cutoff)


def _backward(ctx, grad_energies, grad_forces, grad_virials):
    """Gradient of the per-atom energies only (forces and virials are not differentiable)."""
    positions, edge_index, shifts = ctx.saved_tensors
    epsilon, sigma, cutoff = ctx.parameters
    i, j = edge_index[0], edge_index[1]
    rij, inside, r2, c6 = _pair_terms(positions, edge_index, shifts, sigma, cutoff)
    dphi_over_r = torch.where(inside, -24.0 * epsilon * (2.0 * c6 * c6 - c6) / r2, 0.0)
    # d(1/2 g_i phi(r_ij)) / d r_ij, per edge
    grad_rij = (0.5 * grad_energies[i] * dphi_over_r).unsqueeze(-1) * rij
    grad_positions = (
        torch.zeros_like(positions).index_add_(0, j, grad_rij).index_add_(0, i, -grad_rij)
    )
    return grad_positions, None, grad_rij, None, None, None, None


lennard_jones.register_autograd(_backward, setup_context=_setup_context)
