"""A Nosé–Hoover chain: replicated thermostat variables driven by one global kinetic energy.

The equations and their factorisation are those of ASE's `ase.md.nose_hoover_chain`
(Martyna, Klein, Tuckerman, J. Chem. Phys. 97, 2635 (1992); Tuckerman et al., J. Phys. A
39, 5629 (2006)): each half step is a Suzuki–Yoshida fourth-order sequence of sub-steps, and
the chain acts on the momenta it thermostats only by scaling them. Because momenta are only
scaled, their kinetic energy follows as (scale factor)² × the kinetic energy at the start,
so one global sum per half step suffices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SUZUKI_YOSHIDA_4", "NoseHooverChain"]

SUZUKI_YOSHIDA_4 = (
    1 / (2 - 2 ** (1 / 3)),
    -(2 ** (1 / 3)) / (2 - 2 ** (1 / 3)),
    1 / (2 - 2 ** (1 / 3)),
)


class NoseHooverChain:
    """Chain variables (η_j, p_η_j) with masses Q_j thermostatting `dof` degrees of freedom.

    Args:
        masses: Q_j, eV·(ASE time)²; the chain length is `len(masses)`.
        kt: k_B T, eV.
        dof: degrees of freedom of the thermostatted momenta (the target of their 2 × kinetic
            energy is dof × kT).
        loops: sub-steps per half step.
    """

    def __init__(self, masses: Sequence[float], kt: float, dof: float, loops: int = 1) -> None:
        if not masses:
            raise ValueError("a Nosé–Hoover chain needs at least one thermostat")
        self.masses = [float(q) for q in masses]
        self.kt = float(kt)
        self.dof = float(dof)
        self.loops = int(loops)
        self.eta = [0.0] * len(self.masses)
        self.p_eta = [0.0] * len(self.masses)

    @classmethod
    def with_damping(
        cls, first_dof: float, kt: float, damping: float, length: int, dof: float, loops: int
    ) -> NoseHooverChain:
        """ASE's masses: Q_0 = first_dof·kT·τ², Q_j = kT·τ² (τ = `damping`, ASE time)."""
        tau2 = damping * damping
        masses = [first_dof * kt * tau2] + [kt * tau2] * (length - 1)
        return cls(masses, kt, dof, loops)

    def half_step(self, twice_kinetic: float, delta: float) -> float:
        """Advance the chain by `delta` (ASE time) against momenta whose Σ p²/m is
        `twice_kinetic` (eV); returns the factor that scales those momenta."""
        scale = 1.0
        for _ in range(self.loops):
            for weight in SUZUKI_YOSHIDA_4:
                factor = self._sub_step(twice_kinetic, weight * delta / self.loops)
                scale *= factor
                twice_kinetic *= factor * factor
        return scale

    def _sub_step(self, twice_kinetic: float, delta: float) -> float:
        last = len(self.masses) - 1
        for j in range(last, -1, -1):
            self._kick(j, twice_kinetic, delta)
        self.eta = [
            e + delta * p / q for e, p, q in zip(self.eta, self.p_eta, self.masses, strict=True)
        ]
        factor = math.exp(-delta * self.p_eta[0] / self.masses[0])
        twice_kinetic *= factor * factor
        for j in range(last + 1):
            self._kick(j, twice_kinetic, delta)
        return factor

    def _kick(self, j: int, twice_kinetic: float, delta: float) -> None:
        """p_η_j by delta/2, between two damping factors from p_η_(j+1) over delta/4."""
        inner = j < len(self.masses) - 1
        damping = math.exp(-delta / 4 * self.p_eta[j + 1] / self.masses[j + 1]) if inner else 1.0
        self.p_eta[j] *= damping
        if j == 0:
            force = twice_kinetic - self.dof * self.kt
        else:
            force = self.p_eta[j - 1] ** 2 / self.masses[j - 1] - self.kt
        self.p_eta[j] += delta / 2 * force
        self.p_eta[j] *= damping

    def energy(self) -> float:
        """The chain's term of the conserved energy, eV."""
        potential = self.dof * self.kt * self.eta[0] + self.kt * sum(self.eta[1:])
        return potential + sum(
            0.5 * p * p / q for p, q in zip(self.p_eta, self.masses, strict=True)
        )

    def state_dict(self) -> dict[str, Any]:
        """The chain variables, for checkpoints."""
        return {"eta": list(self.eta), "p_eta": list(self.p_eta)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.eta = [float(x) for x in state["eta"]]
        self.p_eta = [float(x) for x in state["p_eta"]]
