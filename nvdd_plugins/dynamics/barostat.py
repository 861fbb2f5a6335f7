"""MTK cell variables: the isotropic (ε, p_ε) and the flexible (h, p_g) barostat.

Equations as ASE's `IsotropicMTKNPT` and `MTKNPT` (Martyna, Tobias, Klein, J. Chem. Phys.
101, 4177 (1994)). The cell variables are replicated: every rank updates them from the same
reduced sums and the same all-reduced stress, so they stay identical. The per-atom parts
(`drift_positions`, `kick_velocities`) act on the rank's own atoms only.

Units: ASE's (eV, Å, amu, ASE time); stress eV/Å³ (ASE's sign: positive is tensile).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch

from nvdd_plugins.dynamics.chain import NoseHooverChain

__all__ = ["CellBarostat", "FlexibleCell", "IsotropicCell", "barostat_chain"]


def _exprel(x: torch.Tensor) -> torch.Tensor:
    """(e^x - 1) / x element-wise, 1 at x = 0."""
    safe = torch.where(x == 0, torch.ones_like(x), x)
    return torch.where(x == 0, torch.ones_like(x), torch.expm1(safe) / safe)


def _exprel_scalar(x: float) -> float:
    """(e^x - 1) / x, 1 at x = 0."""
    return math.expm1(x) / x if x != 0 else 1.0


class CellBarostat(Protocol):
    """The cell's degrees of freedom as an MTK integrator drives them."""

    mass: float  # W, eV·(ASE time)²
    dof: int  # cell degrees of freedom (the barostat chain's target is dof × kT)

    def cell(self) -> torch.Tensor:
        """The current cell (3, 3), Å (rows are cell vectors)."""

    def volume(self) -> float:
        """The current volume, Å³."""

    def twice_kinetic(self) -> float:
        """Σ p_cell² / W, eV: what the barostat's chain thermostats."""

    def scale_momentum(self, factor: float) -> None:
        """Scale the cell momentum (the barostat chain's action)."""

    def kick(self, delta: float, stress: torch.Tensor, sums: dict[str, torch.Tensor]) -> None:
        """Advance the cell momentum by `delta` under the virial `stress` and the reduced
        kinetic sums (target pressure included)."""

    def drift_cell(self, delta: float) -> None:
        """Advance the cell by `delta`."""

    def drift_positions(
        self, positions: torch.Tensor, velocities: torch.Tensor, delta: float
    ) -> torch.Tensor:
        """Positions after `delta` of the coupled drift."""

    def kick_velocities(
        self, velocities: torch.Tensor, acceleration: torch.Tensor, delta: float, atoms: float
    ) -> torch.Tensor:
        """Velocities after `delta` of the coupled kick (`atoms`: the global atom count)."""

    def energy(self) -> float:
        """Cell kinetic energy, eV."""

    def state_dict(self) -> dict[str, Any]:
        """The cell variables, for checkpoints."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


class IsotropicCell:
    """ASE's `IsotropicMTKNPT` cell: h = h0·e^ε, V = V0·e^(3ε), W = (3N + 3) kT τ².

    Args:
        cell: the initial cell h0 (3, 3), Å.
        atoms: the global number of atoms N.
        kt: k_B T setting the barostat mass, eV.
        pdamp: barostat time scale τ, ASE time.
        pressure: target pressure, eV/Å³.
    """

    dof = 1

    def __init__(
        self, cell: torch.Tensor, atoms: float, kt: float, pdamp: float, pressure: float
    ) -> None:
        self.cell0 = cell.detach().clone()
        self.volume0 = float(torch.linalg.det(self.cell0).abs())
        self.atoms = float(atoms)
        self.mass = (3 * self.atoms + 3) * kt * pdamp**2
        self.pressure = float(pressure)
        self.eps = 0.0
        self.p_eps = 0.0

    def cell(self) -> torch.Tensor:
        """h0·e^ε."""
        return self.cell0 * math.exp(self.eps)

    def volume(self) -> float:
        """V0·e^(3ε)."""
        return self.volume0 * math.exp(3 * self.eps)

    def twice_kinetic(self) -> float:
        """p_ε² / W."""
        return self.p_eps**2 / self.mass

    def scale_momentum(self, factor: float) -> None:
        """p_ε × factor."""
        self.p_eps *= factor

    def kick(self, delta: float, stress: torch.Tensor, sums: dict[str, torch.Tensor]) -> None:
        """p_ε += delta·(3V(P - P_ext) + Σ m v² / N), P with its ideal-gas part."""
        volume = self.volume()
        mv2 = float(sums["mv2"])
        pressure = -float(torch.trace(stress)) / 3 + mv2 / (3 * volume)
        self.p_eps += delta * (3 * volume * (pressure - self.pressure) + mv2 / self.atoms)

    def drift_cell(self, delta: float) -> None:
        """ε += delta·p_ε / W."""
        self.eps += delta * self.p_eps / self.mass

    def drift_positions(
        self, positions: torch.Tensor, velocities: torch.Tensor, delta: float
    ) -> torch.Tensor:
        """q·e^x + delta·v·exprel(x), x = delta·p_ε / W."""
        x = delta * self.p_eps / self.mass
        return positions * math.exp(x) + (delta * _exprel_scalar(x)) * velocities

    def kick_velocities(
        self, velocities: torch.Tensor, acceleration: torch.Tensor, delta: float, atoms: float
    ) -> torch.Tensor:
        """v·e^-x + delta·a·exprel(-x), x = (1 + 1/N)·delta·p_ε / W."""
        x = (1 + 1 / atoms) * self.p_eps * delta / self.mass
        return velocities * math.exp(-x) + (delta * _exprel_scalar(-x)) * acceleration

    def energy(self) -> float:
        """p_ε² / 2W."""
        return 0.5 * self.twice_kinetic()

    def state_dict(self) -> dict[str, Any]:
        """h0, ε and p_ε."""
        return {"cell0": self.cell0.cpu(), "eps": self.eps, "p_eps": self.p_eps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.cell0 = state["cell0"].to(self.cell0)
        self.volume0 = float(torch.linalg.det(self.cell0).abs())
        self.eps, self.p_eps = float(state["eps"]), float(state["p_eps"])


class FlexibleCell:
    """ASE's `MTKNPT` cell: all nine components of h move, W = (N + 1) kT τ².

    Args: as `IsotropicCell`.
    """

    dof = 9

    def __init__(
        self, cell: torch.Tensor, atoms: float, kt: float, pdamp: float, pressure: float
    ) -> None:
        self.h = cell.detach().clone()
        self.atoms = float(atoms)
        self.mass = (self.atoms + 1) * kt * pdamp**2
        self.pressure = float(pressure)
        self.p_g = torch.zeros_like(self.h)

    def cell(self) -> torch.Tensor:
        """h."""
        return self.h

    def volume(self) -> float:
        """|det h|."""
        return float(torch.linalg.det(self.h).abs())

    def twice_kinetic(self) -> float:
        """Σ p_g² / W."""
        return float(self.p_g.square().sum()) / self.mass

    def scale_momentum(self, factor: float) -> None:
        """p_g × factor."""
        self.p_g = self.p_g * factor

    def kick(self, delta: float, stress: torch.Tensor, sums: dict[str, torch.Tensor]) -> None:
        """p_g += delta·(V(σ - P_ext·1) + Σ m v²/(3N)·1), σ = -(stress - Σ m v⊗v / V)."""
        volume = self.volume()
        eye = torch.eye(3, dtype=self.h.dtype, device=self.h.device)
        mvv = sums["mvv"].to(self.h)
        sigma = -(stress.to(self.h) - mvv / volume)
        kinetic = float(sums["mv2"]) / (3 * self.atoms)
        self.p_g = self.p_g + delta * (volume * (sigma - self.pressure * eye) + kinetic * eye)

    def _eigen(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Eigenvalues / W and eigenvectors of p_g."""
        values, vectors = torch.linalg.eigh(self.p_g)
        return values / self.mass, vectors

    def drift_cell(self, delta: float) -> None:
        """h ← h U e^(Λ delta / W) Uᵀ."""
        rates, vectors = self._eigen()
        self.h = ((self.h @ vectors) * torch.exp(rates * delta)) @ vectors.T

    def drift_positions(
        self, positions: torch.Tensor, velocities: torch.Tensor, delta: float
    ) -> torch.Tensor:
        """In p_g's eigenbasis: q·e^(λ delta / W) + delta·v·exprel(λ delta / W)."""
        rates, vectors = (t.to(positions) for t in self._eigen())
        x = rates * delta
        moved = (positions @ vectors) * torch.exp(x) + delta * (velocities @ vectors) * _exprel(x)
        return moved @ vectors.T

    def kick_velocities(
        self, velocities: torch.Tensor, acceleration: torch.Tensor, delta: float, atoms: float
    ) -> torch.Tensor:
        """In p_g's eigenbasis: v·e^-x + delta·a·exprel(-x), x = (λ + tr p_g / 3N)·delta / W."""
        rates, vectors = (t.to(velocities) for t in self._eigen())
        x = (rates + float(torch.trace(self.p_g)) / (3 * atoms * self.mass)) * delta
        kicked = (velocities @ vectors) * torch.exp(-x)
        kicked = kicked + delta * (acceleration @ vectors) * _exprel(-x)
        return kicked @ vectors.T

    def energy(self) -> float:
        """Σ p_g² / 2W."""
        return 0.5 * self.twice_kinetic()

    def state_dict(self) -> dict[str, Any]:
        """h and p_g."""
        return {"h": self.h.cpu(), "p_g": self.p_g.cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.h, self.p_g = state["h"].to(self.h), state["p_g"].to(self.p_g)


def barostat_chain(
    cell: CellBarostat, kt: float, pdamp: float, length: int, loops: int
) -> NoseHooverChain:
    """ASE's chain on the cell momentum: R_0 = 9 kT τ², R_j = kT τ², target dof × kT."""
    return NoseHooverChain.with_damping(9, kt, pdamp, length, cell.dof, loops)
