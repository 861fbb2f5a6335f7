"""Ewald summation of point charges, as per-atom energies (in e²/Å; times the Coulomb
constant for eV), written so that it runs unchanged under domain decomposition.

The Coulomb energy of a periodic system splits into a real-space part (pairs within the
cutoff, erfc-screened: local, it fits the halo), a self term per atom, and a reciprocal
part built from the structure factors S(k) = sum_j q_j exp(i k.r_j), a sum over every atom.
Each rank sums S(k) over the atoms it owns (`owned_part`) and one all-reduce
(`summed_over_ranks`) completes it; the per-atom energy q_i Re[exp(-i k.r_i) S(k)] then
needs only atom i. docs/long_range.md gives the formulas and the distribution.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
from ase import units

from nvdd_plugins.models.base import ModelInputs, host_checks_allowed
from nvdd_plugins.spec import owned_part, summed_over_ranks

__all__ = [
    "COULOMB_CONSTANT",
    "Ewald",
    "background_energies",
    "half_space_miller_indices",
    "real_space_pair_energies",
    "require_one_periodic_system",
    "self_energies",
    "summed_with_total_charge",
]

logger = logging.getLogger(__name__)

COULOMB_CONSTANT = units.Hartree * units.Bohr
"""1 / (4 pi epsilon_0) in eV Å / e² (ASE's units; LAMMPS metal's qqr2e is 14.399645)."""

NET_CHARGE_WARNED = 1e-5
"""A net charge (e) above which a lattice sum warns, once per process (LAMMPS's threshold)."""

_warned_net_charge: list[float] = []  # the net charge warned about (once per process)


def require_one_periodic_system(inputs: ModelInputs, model: str) -> None:
    """Raise a ValueError unless `inputs` hold one system periodic along all three axes (a
    lattice sum needs a cell)."""
    if inputs.num_graphs != 1 or not bool(inputs.pbc.all()):
        raise ValueError(
            f"{model} sums Coulomb over a lattice: give it one system, periodic along all "
            f"three axes (got {inputs.num_graphs} systems, pbc {inputs.pbc.tolist()})"
        )


def _warn_if_charged(total_charge: torch.Tensor) -> None:
    """Warn, once per process, when the system the lattice sum sees carries a net charge:
    its energy then includes the neutralising background's, which depends on alpha."""
    if _warned_net_charge or not host_checks_allowed():
        return
    charge = float(total_charge.detach())
    if abs(charge) > NET_CHARGE_WARNED:
        _warned_net_charge.append(charge)
        logger.warning(
            "Ewald/PME on a system with a net charge of %.6g e: the energy includes a "
            "uniform neutralising background (-pi Q^2 / (2 V alpha^2)), so it depends on "
            "alpha and the cell volume; forces are unaffected by it, stress is not",
            charge,
        )


def real_space_pair_energies(
    charges_i: torch.Tensor, charges_j: torch.Tensor, distances: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Real-space Ewald energy q_i q_j erfc(alpha r) / r (e²/Å) of pairs at distances r;
    a per-atom split gives each atom of an ordered pair (both directions listed) half."""
    return charges_i * charges_j * torch.special.erfc(alpha * distances) / distances


def self_energies(charges: torch.Tensor, alpha: float) -> torch.Tensor:
    """Per-atom Ewald self energies, -alpha / sqrt(pi) q_i² (e²/Å)."""
    return -alpha / math.sqrt(math.pi) * charges.square()


def background_energies(
    charges: torch.Tensor, total_charge: torch.Tensor, alpha: float, volume: torch.Tensor
) -> torch.Tensor:
    """Per-atom share of the neutralising background of a system of net charge Q:
    -pi q_i Q / (2 V alpha²) (e²/Å), summing to -pi Q² / (2 V alpha²); zero when neutral."""
    return -math.pi / (2.0 * alpha**2) * charges * total_charge / volume


def summed_with_total_charge(
    partial: torch.Tensor, owned_charges: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`partial` (this rank's share of a reciprocal-space sum) and the owned charges' total,
    summed over the ranks in one all-reduce: (the sum, shaped like `partial`; the system's
    net charge, a scalar)."""
    flat = torch.cat([partial.reshape(-1), owned_charges.sum().reshape(1)])
    summed = summed_over_ranks(flat)
    _warn_if_charged(summed[-1])
    return summed[:-1].reshape(partial.shape), summed[-1]


def half_space_miller_indices(
    cell: torch.Tensor, k_cutoff: float, k_set: str = "sphere"
) -> torch.Tensor:
    """(K, 3) integer Miller indices m != 0 of one half of k-space (m or -m, never both)
    for a (3, 3) `cell` with lattice vectors as rows, from the cell's values only (not
    differentiated). `k_set` "sphere": the wave vectors k = 2 pi m inv(cell)^T with
    |k| <= `k_cutoff` (1/Å); "box": every m with |m_i| <= ceil(k_cutoff |a_i| / 2 pi)
    (nvalchemi-toolkit-ops' set, which aimnet's calculator uses)."""
    cell = cell.detach().to(torch.float64).cpu()
    reach = k_cutoff * torch.linalg.vector_norm(cell, dim=1) / (2.0 * math.pi)
    bounds = reach.ceil() if k_set == "box" else reach.floor()
    axes = [torch.arange(-b, b + 1, dtype=torch.float64) for b in bounds.tolist()]
    m = torch.cartesian_prod(*axes).reshape(-1, 3)
    first = (m[:, 0] > 0) | ((m[:, 0] == 0) & ((m[:, 1] > 0) | ((m[:, 1] == 0) & (m[:, 2] > 0))))
    if k_set == "box":
        return m[first]
    k = 2.0 * math.pi * m @ torch.linalg.inv(cell).T
    return m[first & (torch.linalg.vector_norm(k, dim=1) <= k_cutoff)]


@dataclass(frozen=True)
class Ewald:
    """Ewald summation: splitting parameter `alpha` (1/Å) and reciprocal cutoff `k_cutoff`
    (1/Å); the real-space cutoff is the model's. `for_accuracy` picks both. `k_set` says
    which k-vectors the cutoff selects (`half_space_miller_indices`): "sphere" (|k| <=
    k_cutoff) or "box" (nvalchemi-toolkit-ops' and aimnet's)."""

    alpha: float
    k_cutoff: float
    k_set: str = "sphere"

    def __post_init__(self) -> None:
        if not (self.alpha > 0 and self.k_cutoff > 0):
            raise ValueError(f"alpha and k_cutoff must be > 0 (1/Å), got {self}")
        if self.k_set not in ("sphere", "box"):
            raise ValueError(f"k_set must be 'sphere' or 'box', got {self.k_set!r}")

    @classmethod
    def for_accuracy(cls, cutoff: float, accuracy: float = 1e-6) -> Ewald:
        """Parameters whose real-space and reciprocal truncation terms, erfc(alpha r_c) and
        exp(-k_c² / 4 alpha²), are both about `accuracy` at the real-space `cutoff` (Å)."""
        if not 0 < accuracy < 1:
            raise ValueError(f"accuracy must be in (0, 1), got {accuracy!r}")
        p = math.sqrt(-math.log(accuracy))
        alpha = p / cutoff
        return cls(alpha=alpha, k_cutoff=2.0 * alpha * p)

    def reciprocal_energies(
        self, positions: torch.Tensor, charges: torch.Tensor, cell: torch.Tensor
    ) -> torch.Tensor:
        """Per-atom reciprocal-space energies plus the background term (e²/Å) of every row
        of `positions` (n, 3) with `charges` (n,) in the periodic `cell` (3, 3)."""
        m = half_space_miller_indices(cell, self.k_cutoff, self.k_set).to(positions)
        k = 2.0 * math.pi * m @ torch.linalg.inv(cell).T  # follows a strained cell
        volume = torch.linalg.det(cell).abs()
        k2 = k.square().sum(dim=1)
        weights = 4.0 * math.pi / volume * torch.exp(-k2 / (4.0 * self.alpha**2)) / k2
        owned_charges = owned_part(charges)
        owned_phase = owned_part(positions) @ k.T
        partial = torch.stack(
            [owned_charges @ owned_phase.cos(), owned_charges @ owned_phase.sin()]
        )
        (cos_sum, sin_sum), total = summed_with_total_charge(partial, owned_charges)
        phase = positions @ k.T
        potential = (phase.cos() * cos_sum + phase.sin() * sin_sum) @ weights
        return charges * potential + background_energies(charges, total, self.alpha, volume)
