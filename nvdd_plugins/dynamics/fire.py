"""`FIRE`: the fast inertial relaxation engine, as ASE's `ase.optimize.FIRE`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.base import BaseDynamics
from nvdd_plugins.dynamics.stages import Hook
from nvdd_plugins.models import BaseModelMixin

__all__ = ["FIRE"]

VELOCITY_FIELD = "fire_velocities"


class FIRE(BaseDynamics):
    """FIRE (Bitzek et al., Phys. Rev. Lett. 97, 170201 (2006)) with ASE's update rules and
    parameters (`downhill_check=False`); converged when every atom's force is below `fmax`.

    The FIRE velocities (ASE's `FIRE.vel`, not the atoms' velocities) are the per-atom field
    "fire_velocities", so they migrate with their atoms. The global quantities — v·f, v·v,
    f·f and the number of atoms with |f| >= fmax — are one reduction per step, taken after
    the force call: the next step's mixing, the step length (|v + Δt f| follows from them)
    and the convergence test read it, so every rank takes the same decisions.

    Args:
        model: the model wrapper.
        dt: initial step, fs (ASE's default 0.1 ASE time units).
        fmax: convergence threshold on the largest atomic force, eV/Å.
        maxstep: longest displacement of the whole system per step, Å (ASE's rule: the norm
            over all atoms).
        dtmax: largest step, fs (ASE's default 1.0 ASE time units).
        n_min, finc, fdec, astart, fa: ASE's `Nmin`, `finc`, `fdec`, `astart`, `fa`.
    """

    global_convergence = True

    def __init__(
        self,
        model: BaseModelMixin,
        dt: float = 0.1 / ase.units.fs,
        fmax: float = 0.05,
        maxstep: float = 0.2,
        dtmax: float = 1.0 / ase.units.fs,
        n_min: int = 5,
        finc: float = 1.1,
        fdec: float = 0.5,
        astart: float = 0.1,
        fa: float = 0.99,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        super().__init__(model, dt, hooks, skin)
        self.fmax = float(fmax)
        self.maxstep = float(maxstep)
        self.dtmax = float(dtmax)
        self.n_min = int(n_min)
        self.finc, self.fdec = float(finc), float(fdec)
        self.astart, self.fa = float(astart), float(fa)
        self.a = self.astart
        self.n_positive = 0  # ASE's Nsteps: steps since v·f was last <= 0
        self.started = False
        self.sums: dict[str, float] | None = None  # the last reduction

    def partials(self, batch: Batch) -> dict[str, torch.Tensor]:
        """This rank's share of v·f, v·v, f·f and of the atoms with |f| >= fmax."""
        forces, velocities = batch.forces, batch.get(VELOCITY_FIELD)
        if velocities is None:
            velocities = torch.zeros_like(forces)
        above = torch.linalg.vector_norm(forces, dim=-1) >= self.fmax
        return {
            "vf": (velocities * forces).sum(),
            "vv": velocities.square().sum(),
            "ff": forces.square().sum(),
            "unconverged": above.sum().to(forces.dtype),
        }

    def _reduce(self, batch: Batch) -> dict[str, float]:
        self.sums = {k: float(v) for k, v in self.reduce_sums(self.partials(batch)).items()}
        return self.sums

    def pre_update(self, batch: Batch) -> None:
        """Mix the velocities towards the forces (or stop), kick, and move (capped)."""
        sums = self.sums or self._reduce(batch)
        if self.started:
            velocities, speed2 = self._mix(batch, sums)
        else:  # ASE's first step: v = 0, no mixing, the step is kept
            self.started = True
            velocities = self.dt * ase.units.fs * batch.forces
            speed2 = (self.dt * ase.units.fs) ** 2 * sums["ff"]
        if VELOCITY_FIELD in batch:
            batch.fire_velocities = velocities
        else:
            batch.add_node_property(VELOCITY_FIELD, velocities)
        dt = self.dt * ase.units.fs
        length = dt * math.sqrt(speed2)
        step = dt * velocities
        if length > self.maxstep:
            step = step * (self.maxstep / length)
        batch.positions = batch.positions + step

    def _mix(self, batch: Batch, sums: dict[str, float]) -> tuple[torch.Tensor, float]:
        """ASE's velocity update; returns v + Δt f and its squared norm (from the sums)."""
        forces, velocities = batch.forces, batch.get(VELOCITY_FIELD)
        vf, vv, ff = sums["vf"], sums["vv"], sums["ff"]
        if vf > 0.0:
            c = self.a * math.sqrt(vv) / math.sqrt(ff)
            mixed_a = 1.0 - self.a
            if self.n_positive > self.n_min:
                self.dt = min(self.dt * self.finc, self.dtmax)
                self.a *= self.fa
            self.n_positive += 1
        else:
            c, mixed_a = 0.0, 0.0
            self.a = self.astart
            self.dt *= self.fdec
            self.n_positive = 0
        dt = self.dt * ase.units.fs
        # v' = mixed_a v + c f, then v' + dt f; |.|^2 expanded (no cancellation: vf > 0)
        g = c + dt
        speed2 = mixed_a * mixed_a * vv + 2.0 * mixed_a * g * vf + g * g * ff
        return mixed_a * velocities + g * forces, speed2

    def post_update(self, batch: Batch) -> None:
        """Reduce the next step's sums (and the convergence count) at the new forces."""
        self._reduce(batch)

    def is_converged(self, batch: Batch) -> bool:
        """Whether every atom of the system has |f| < fmax (from the last reduction)."""
        return self.sums is not None and self.sums["unconverged"] == 0.0

    def state_dict(self) -> dict[str, Any]:
        """Step count, current step (fs), mixing `a` and ASE's Nsteps."""
        return {
            **super().state_dict(),
            "dt": self.dt,
            "a": self.a,
            "n_positive": self.n_positive,
            "started": self.started,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned; the sums are reduced afresh."""
        super().load_state_dict(state)
        self.dt, self.a = float(state["dt"]), float(state["a"])
        self.n_positive, self.started = int(state["n_positive"]), bool(state["started"])
        self.sums = None
