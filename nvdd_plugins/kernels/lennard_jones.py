"""Lennard-Jones energies, forces and virials as one opaque custom op, `nvdd::lennard_jones`.

The op computes forces directly (no autograd), like a fused GPU kernel would; distributing it
therefore needs an adapter (`SPEC_LJ_HALO`), which is what this kernel exists to exercise.

The op is registered with the plain `torch.library` dispatcher API, not `custom_op`: a
`custom_op` call goes through `torch._disable_dynamo`, which imports `torch._dynamo` (about
1-2 s) on the first eager call. On the CPU, when the edges come grouped by their first atom
(as every nvdd neighbour list gives them), the per-atom sums are one `segment_reduce` over a
(13, E) block of energies, forces and virials instead of three `index_add_` scatters: the
same additions in the same order (bit-identical), three to four times faster. Where the
native C library loads (`nvdd_plugins.native`), the CPU forward is one loop over the edges
instead, term by term the same arithmetic.
"""

from __future__ import annotations

import torch

from nvdd_plugins.native import lennard_jones_native

__all__ = ["lennard_jones"]

_SCHEMA = (
    "(Tensor positions, Tensor edge_index, Tensor shifts, float epsilon, float sigma, "
    "float cutoff, bool shift_energy, bool virials=True) -> (Tensor, Tensor, Tensor)"
)
torch.library.define("nvdd::lennard_jones", _SCHEMA)


def _pair_terms(
    positions: torch.Tensor,
    edge_index: torch.Tensor,
    shifts: torch.Tensor,
    sigma: float,
    cutoff: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pair vectors as (3, E) rows, the inside-cutoff mask, r^2 (1 outside, to stay finite)
    and (sigma/r)^6. Component rows keep every elementwise op on contiguous memory (an
    (E, 3) layout's row sums and broadcast products are several times slower on the CPU)."""
    columns = positions.t().contiguous()
    rij = columns.index_select(1, edge_index[1]) - columns.index_select(1, edge_index[0])
    rij += shifts.t()
    x, y, z = rij
    r2 = x * x + y * y + z * z  # the same additions, in order, as (rij * rij).sum(-1)
    inside = r2 < cutoff * cutoff
    r2 = torch.where(inside, r2, 1.0)
    return rij, inside, r2, (sigma * sigma / r2) ** 3


def _sum_by_first_atom(rows: torch.Tensor, i: torch.Tensor, n: int) -> torch.Tensor:
    """`zeros(C, n).index_add_(1, i, rows)` for (C, E) `rows`; on the CPU with `i` sorted, a
    segment sum (the same additions in the same order, without the scatter)."""
    if rows.device.type == "cpu" and i.numel() > 1 and bool((i[1:] >= i[:-1]).all()):
        lengths = torch.bincount(i, minlength=n).expand(rows.shape[0], n)
        return torch.segment_reduce(rows, "sum", lengths=lengths, axis=1, unsafe=True)
    return rows.new_zeros(rows.shape[0], n).index_add_(1, i, rows)


def _lennard_jones(
    positions: torch.Tensor,
    edge_index: torch.Tensor,
    shifts: torch.Tensor,
    epsilon: float,
    sigma: float,
    cutoff: float,
    shift_energy: bool,
    virials: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-atom LJ energies (eV), forces (eV/Å) and virials (eV) from a full neighbour list.

    `edge_index` rows are (i, j) with r_ij = x[j] - x[i] + shifts; each unordered pair must
    appear in both directions. Pairs at r >= cutoff contribute nothing. Energies take half of
    each pair term; `virials[i] = 1/2 sum_j phi'(r) r_ij (x) r_ij / r`, so
    `stress = virials.sum(0) / volume`. Forces on atom i use only edges centred on i, so they
    are complete for any atom whose neighbours are all present. Without `virials` they are
    not computed (an empty (0, 3, 3) tensor instead; energies and forces are the same).
    """
    offset = (
        4.0 * epsilon * ((sigma / cutoff) ** 12 - (sigma / cutoff) ** 6) if shift_energy else 0.0
    )
    native = lennard_jones_native(
        positions, edge_index, shifts, epsilon, sigma, cutoff, offset, virials
    )
    if native is not None:
        return native
    rij, inside, r2, c6 = _pair_terms(positions, edge_index, shifts, sigma, cutoff)
    c12 = c6 * c6
    # One (13, E) block: half pair energy, pair force, half force (x) r_ij, summed at once
    # (without virials the first 4 rows).
    block = rij.new_empty(13 if virials else 4, r2.shape[0])
    energy = torch.where(inside, 4.0 * epsilon * (c12 - c6) - offset, 0.0)
    torch.mul(energy, 0.5, out=block[0])
    dphi_over_r = torch.where(inside, -24.0 * epsilon * (2.0 * c12 - c6) / r2, 0.0)
    for a in range(3):
        torch.mul(dphi_over_r, rij[a], out=block[1 + a])
        if not virials:
            continue
        half_force = 0.5 * block[1 + a]
        for b in range(3):
            torch.mul(half_force, rij[b], out=block[4 + 3 * a + b])
    n = positions.shape[0]
    sums = _sum_by_first_atom(block, edge_index[0], n)
    per_atom_virials = sums[4:].t().reshape(-1, 3, 3).contiguous()
    return sums[0].clone(), sums[1:4].t().contiguous(), per_atom_virials


torch.library.impl("nvdd::lennard_jones", "CompositeExplicitAutograd", _lennard_jones)


lennard_jones = torch.ops.nvdd.lennard_jones
"""The op (an `OpOverloadPacket`): `lennard_jones(positions, edge_index, shifts, epsilon,
sigma, cutoff, shift_energy, virials=True) -> (energies, forces, virials)`; virials (0, 3, 3)
when `virials` is False."""


@torch.library.register_fake("nvdd::lennard_jones")
def _(positions, edge_index, shifts, epsilon, sigma, cutoff, shift_energy, virials=True):
    n = positions.shape[0]
    per_atom_virials = positions.new_empty(n if virials else 0, 3, 3)
    return positions.new_empty(n), positions.new_empty(n, 3), per_atom_virials


def _setup_context(ctx, inputs, output) -> None:
    positions, edge_index, shifts, epsilon, sigma, cutoff = inputs[:6]
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
    grad_rij = ((0.5 * grad_energies[i] * dphi_over_r) * rij).t()
    grad_positions = (
        torch.zeros_like(positions).index_add_(0, j, grad_rij).index_add_(0, i, -grad_rij)
    )
    return grad_positions, None, grad_rij, None, None, None, None, None


torch.library.register_autograd("nvdd::lennard_jones", _backward, setup_context=_setup_context)
