"""`FIRE`: the fast inertial relaxation engine, as ASE's `ase.optimize.FIRE`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.base import BaseDynamics
from nvdd_plugins.dynamics.keywords import moved_keywords, require_value_of
from nvdd_plugins.dynamics.stages import Hook
from nvdd_plugins.models import BaseModelMixin

__all__ = ["FIRE", "FIRESettings"]

VELOCITY_FIELD = "fire_velocities"


@dataclass(frozen=True)
class FIRESettings:
    """ASE's FIRE step and mixing constants (`ase.optimize.FIRE`'s names, times in fs).

    Attributes:
        maxstep: longest displacement of the whole system per step, Å (ASE's rule: the
            norm over all atoms).
        dtmax: largest step, fs (ASE's default 1.0 ASE time units).
        n_min, finc, fdec, astart, fa: ASE's `Nmin`, `finc`, `fdec`, `astart`, `fa`.
    """

    maxstep: float = 0.2
    dtmax: float = 1.0 / ase.units.fs
    n_min: int = 5
    finc: float = 1.1
    fdec: float = 0.5
    astart: float = 0.1
    fa: float = 0.99


_SETTING_NAMES = ("maxstep", "dtmax", "n_min", "finc", "fdec", "astart", "fa")
# earlier releases' keywords (ASE's names) and nvalchemi's, as written in FIRESettings(...)
FIRE_MOVES = {
    **{name: f"{name}=..." for name in _SETTING_NAMES},
    "f_alpha": "fa=f_alpha",
    "f_inc": "finc=f_inc",
    "dt_max": "dtmax=dt_max / ase.units.fs (in fs, as dt)",
}
FIRE_EXAMPLE = "FIRESettings(maxstep=0.2, dtmax=...)"


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
        settings: ASE's step and mixing constants (default `FIRESettings()`).
    """

    global_convergence = True

    @moved_keywords("settings", FIRESettings, FIRE_MOVES)
    def __init__(
        self,
        model: BaseModelMixin,
        dt: float = 0.1 / ase.units.fs,
        fmax: float = 0.05,
        settings: FIRESettings | None = None,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        if settings is not None:
            require_value_of(settings, FIRESettings, type(self).__name__, "settings", FIRE_EXAMPLE)
        super().__init__(model, dt, hooks, skin)
        self.fmax = float(fmax)
        self.settings = FIRESettings() if settings is None else settings
        self.a = self.settings.astart
        self.n_positive = 0  # ASE's Nsteps: steps since v·f was last <= 0
        self.started = False
        self.sums: dict[str, float] | None = None  # the last reduction

    def partials(self, batch: Batch) -> dict[str, torch.Tensor]:
        """This rank's share of v·f, v·v, f·f, of the atoms with |f| >= fmax and of the atom
        count (f: `forces_of(batch)`, v: the FIRE velocities)."""
        forces = self.forces_of(batch)
        velocities = batch.get(VELOCITY_FIELD)
        if velocities is None:
            velocities = torch.zeros_like(forces)
        above = torch.linalg.vector_norm(forces, dim=-1) >= self.fmax
        return {
            "vf": (velocities * forces).sum(),
            "vv": velocities.square().sum(),
            "ff": forces.square().sum(),
            "unconverged": above.sum().to(forces.dtype),
            "atoms": torch.tensor(float(batch.num_nodes), dtype=forces.dtype, device=forces.device),
        }

    def forces_of(self, batch: Batch) -> torch.Tensor:
        """The forces FIRE follows for the batch's atoms (the atomic forces)."""
        return batch.forces

    def replicated_sums(self, batch: Batch, atoms: float) -> dict[str, float]:
        """Replicated degrees of freedom's share of the sums (none here), added once to
        the reduced ones."""
        return {}

    def _reduce(self, batch: Batch) -> dict[str, float]:
        sums = {k: float(v) for k, v in self.reduce_sums(self.partials(batch)).items()}
        for name, value in self.replicated_sums(batch, sums["atoms"]).items():
            sums[name] += value
        self.sums = sums
        return sums

    def pre_update(self, batch: Batch) -> None:
        """Mix the velocities towards the forces (or stop), kick, and move (capped)."""
        sums = self.sums or self._reduce(batch)
        keep, push = self._mixing(sums)
        # |keep v + push f|² from the sums (no cancellation: keep > 0 only when v·f > 0)
        speed2 = keep * keep * sums["vv"] + 2 * keep * push * sums["vf"] + push * push * sums["ff"]
        velocities = batch.get(VELOCITY_FIELD)
        forces = self.forces_of(batch)
        velocities = push * forces if velocities is None else keep * velocities + push * forces
        if VELOCITY_FIELD in batch:
            batch.fire_velocities = velocities
        else:
            batch.add_node_property(VELOCITY_FIELD, velocities)
        dt = self.dt * ase.units.fs
        length = dt * math.sqrt(speed2)
        maxstep = self.settings.maxstep
        factor = dt * (maxstep / length if length > maxstep else 1.0)
        self.move(batch, factor, keep, push)

    def _mixing(self, sums: dict[str, float]) -> tuple[float, float]:
        """ASE's velocity update v ← keep·v + push·f (and its step and mixing updates)."""
        if not self.started:  # ASE's first step: v = 0, no mixing, the step is kept
            self.started = True
            return 0.0, self.dt * ase.units.fs
        vf, vv, ff = sums["vf"], sums["vv"], sums["ff"]
        constants = self.settings
        if vf > 0.0:
            keep, toward_force = 1.0 - self.a, self.a * math.sqrt(vv) / math.sqrt(ff)
            if self.n_positive > constants.n_min:
                self.dt = min(self.dt * constants.finc, constants.dtmax)
                self.a *= constants.fa
            self.n_positive += 1
        else:
            keep, toward_force = 0.0, 0.0
            self.a = constants.astart
            self.dt *= constants.fdec
            self.n_positive = 0
        return keep, toward_force + self.dt * ase.units.fs

    def move(self, batch: Batch, factor: float, keep: float, push: float) -> None:
        """Displace the atoms by `factor` × their FIRE velocities (`keep`, `push`: this
        step's velocity update, for replicated degrees of freedom)."""
        batch.positions = batch.positions + factor * batch.fire_velocities

    def post_update(self, batch: Batch) -> None:
        """Reduce the next step's sums (and the convergence count) at the new forces."""
        self._reduce(batch)

    def is_converged(self, batch: Batch) -> bool:
        """Whether every atom of the system (and replicated degree of freedom) has
        |f| < fmax (from the last reduction)."""
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
