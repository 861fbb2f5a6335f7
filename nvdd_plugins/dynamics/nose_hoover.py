"""`NoseHoover`: NVT with a Nosé–Hoover chain, as ASE's `NoseHooverChainNVT`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ase.units

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.chain import NoseHooverChain
from nvdd_plugins.dynamics.integrators import _acceleration
from nvdd_plugins.dynamics.kinetic import KineticDynamics
from nvdd_plugins.dynamics.stages import Hook
from nvdd_plugins.models import BaseModelMixin

__all__ = ["NoseHoover"]


class NoseHoover(KineticDynamics):
    """Constant temperature with a Nosé–Hoover chain: chain half step, velocity Verlet,
    chain half step (ASE's `NoseHooverChainNVT`, same parameters in fs instead of ASE time).

    The chain acts on the global kinetic energy: one reduction per step (Σ m v² and the atom
    count after the second kick); the chain variables are replicated on every rank.

    Args:
        model: the model wrapper.
        dt: time step, fs.
        temperature: target temperature, K.
        tdamp: thermostat time scale, fs (typically 100 × dt).
        tchain: number of thermostats in the chain.
        tloop: sub-steps per chain half step.
    """

    def __init__(
        self,
        model: BaseModelMixin,
        dt: float,
        temperature: float,
        tdamp: float,
        tchain: int = 3,
        tloop: int = 1,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        super().__init__(model, dt, hooks, skin)
        if temperature < 0 or not tdamp > 0 or tchain < 1 or tloop < 1:
            raise ValueError("need temperature >= 0 K, tdamp > 0 fs, tchain >= 1, tloop >= 1")
        self.temperature = float(temperature)
        self.tdamp = float(tdamp)
        self.tchain = int(tchain)
        self.tloop = int(tloop)
        self.thermostat: NoseHooverChain | None = None

    def _chain(self, atoms: float) -> NoseHooverChain:
        if self.thermostat is None:
            kt = ase.units.kB * self.temperature
            tdamp = self.tdamp * ase.units.fs
            dof = 3.0 * atoms
            self.thermostat = NoseHooverChain.with_damping(
                dof, kt, tdamp, self.tchain, dof, self.tloop
            )
        return self.thermostat

    def pre_update(self, batch: Batch) -> None:
        """Chain half step, half kick, drift."""
        dt = self.dt_internal
        sums = self.kinetic.start(batch, self.reduce_sums)
        chain = self._chain(float(sums["atoms"]))
        scale = chain.half_step(float(sums["mv2"]), 0.5 * dt)
        velocities = batch.velocities * scale + 0.5 * dt * _acceleration(batch)
        batch.velocities = velocities
        batch.positions = batch.positions + dt * velocities

    def post_update(self, batch: Batch) -> None:
        """Half kick, then (one reduction) chain half step."""
        velocities = batch.velocities + 0.5 * self.dt_internal * _acceleration(batch)
        batch.velocities = velocities
        sums = self.end_of_step_sums(batch)
        chain = self._chain(float(sums["atoms"]))
        scale = chain.half_step(float(sums["mv2"]), 0.5 * self.dt_internal)
        batch.velocities = velocities * scale
        self.kinetic.carry(sums, scale)

    def conserved_energy(self, batch: Batch) -> float:
        """Potential + kinetic + thermostat energy (eV) of the whole system; collective
        under `DomainParallel` (reduces the kinetic energy)."""
        chain = 0.0 if self.thermostat is None else self.thermostat.energy()
        return float(batch.energy.sum()) + self.kinetic_energy(batch) + chain

    def state_dict(self) -> dict[str, Any]:
        """Step count, the chain variables and the atom count they were built for."""
        state = super().state_dict()
        if self.thermostat is not None:
            state["thermostat"] = self.thermostat.state_dict()
            state["atoms"] = self.thermostat.dof / 3.0
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned; the kinetic energy is reduced afresh."""
        super().load_state_dict(state)
        self.thermostat = None
        if "thermostat" in state:
            self._chain(float(state["atoms"])).load_state_dict(state["thermostat"])
        self.forget_globals()
