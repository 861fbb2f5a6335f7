"""AIMNet2's Coulomb terms as per-atom energies: aimnet's short-range Coulomb and its damped
shifted force (DSF), each pair term split half onto each of its atoms (docs/aimnet2.md)."""

from __future__ import annotations

import math

import torch
from torch import nn

from nvdd_plugins.models.base import host_checks_allowed

__all__ = ["dsf_coulomb", "pairs_within", "short_range_coulomb"]


def pairs_within(near: torch.Tensor, *per_pair: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rows of each of `per_pair` where `near` holds; at fixed shapes (compiled, or
    captured as a CUDA graph: no data-dependent shape) all of them, since aimnet's cutoff
    functions weigh the pairs beyond their cutoffs exactly zero."""
    if not host_checks_allowed():
        return per_pair
    return tuple(values[near] for values in per_pair)


def _pair_energies_onto_atoms(
    e_ij: torch.Tensor, i: torch.Tensor, head: nn.Module, n_atoms: int
) -> torch.Tensor:
    """aimnet's half-Hartree-times-Bohr factor times the sum of each atom's ordered pairs, in
    float64 (each pair's energy split half onto each of its atoms)."""
    out = torch.zeros(n_atoms, dtype=torch.float64, device=e_ij.device)
    return head._factor * out.index_add_(0, i, e_ij.to(torch.float64))


def short_range_coulomb(
    head: nn.Module, i: torch.Tensor, j: torch.Tensor, d_ij: torch.Tensor, q: torch.Tensor, n: int
) -> torch.Tensor:
    """Per-atom short-range Coulomb of aimnet's `_calc_coulomb_sr` (its envelope) over the
    pairs (i, j) at distances `d_ij` of `n` atoms with charges `q`."""
    from aimnet import ops  # optional dependency

    if head.envelope == "exp":
        fc = ops.exp_cutoff(d_ij, head.rc)
    else:
        fc = ops.cosine_cutoff(d_ij, float(head.rc))
    return _pair_energies_onto_atoms(fc * q[i] * q[j] / d_ij, i, head, n)


def dsf_coulomb(
    head: nn.Module, i: torch.Tensor, j: torch.Tensor, d_ij: torch.Tensor, q: torch.Tensor, n: int
) -> torch.Tensor:
    """Per-atom damped-shifted-force Coulomb of aimnet's `LRCoulomb._coul_dsf_torch`: pair
    terms within `dsf_rc` (aimnet's `coulomb_matrix_dsf`) and the self term."""
    from aimnet import ops  # optional dependency

    i, j, d = pairs_within(d_ij < head.dsf_rc, i, j, d_ij)
    pair = ops.coulomb_matrix_dsf(d, head.dsf_rc, head.dsf_alpha, {"mask_ij_lr": d < 0})
    energies = _pair_energies_onto_atoms(q[i] * q[j] * pair, i, head, n)
    alpha, rc = head.dsf_alpha, head.dsf_rc
    self_coeff = -(math.erfc(alpha * rc) / (2 * rc) + alpha / math.sqrt(math.pi))
    return energies + 2.0 * head._factor * self_coeff * q.to(torch.float64).pow(2)
