"""AIMNet2's Coulomb terms as per-atom energies: aimnet's short-range Coulomb, its damped
shifted force (DSF) and Ewald or PME lattice sums, each pair term split half onto each of
its atoms (docs/aimnet2.md)."""

from __future__ import annotations

import math

import torch
from torch import nn

from nvdd_plugins.models.base import ModelInputs, host_checks_allowed
from nvdd_plugins.models.ewald import (
    Ewald,
    real_space_pair_energies,
    require_one_periodic_system,
    self_energies,
)
from nvdd_plugins.models.pme import PME

__all__ = ["dsf_coulomb", "lattice_coulomb", "pairs_within", "short_range_coulomb"]


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


def lattice_coulomb(
    electrostatics: Ewald | PME,
    cutoff: float,
    inputs: ModelInputs,
    pairs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    q: torch.Tensor,
) -> torch.Tensor:
    """Per-atom Coulomb energies (eV, float64) of aimnet's `LRCoulomb` with method "ewald"
    or "pme" (nvalchemi-toolkit-ops' sums): the real-space term of the `pairs` (i, j,
    distance) within `cutoff` (Å), the self term and the reciprocal sum of `electrostatics`
    over the charges `q` of one periodic system."""
    from aimnet import constants  # optional dependency

    require_one_periodic_system(inputs, "AIMNet2 with Ewald or PME")
    i, j, d = pairs
    within = d < cutoff
    i, j, d = i[within], j[within], d[within]
    q = q.to(torch.float64)
    real = real_space_pair_energies(q[i], q[j], d.to(torch.float64), electrostatics.alpha)
    energies = q.new_zeros(q.shape[0]).index_add_(0, i, 0.5 * real)
    positions, cell = inputs.positions.to(torch.float64), inputs.cell[0].to(torch.float64)
    energies = energies + self_energies(q, electrostatics.alpha)
    energies = energies + electrostatics.reciprocal_energies(positions, q, cell)
    return constants.Hartree * constants.Bohr * energies
