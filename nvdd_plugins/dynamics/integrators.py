"""Shipped per-atom integrators: `NVE` (velocity Verlet) and `NVTLangevin` (BAOAB)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ase.units
import torch

from nvdd_plugins.data import Batch
from nvdd_plugins.dynamics.base import BaseDynamics
from nvdd_plugins.dynamics.random import counter_normal
from nvdd_plugins.dynamics.stages import Hook
from nvdd_plugins.models import BaseModelMixin

__all__ = ["NVE", "NVTLangevin"]


def _acceleration(batch: Batch) -> torch.Tensor:
    return batch.forces / batch.atomic_masses.unsqueeze(-1)


class NVE(BaseDynamics):
    """Velocity Verlet at constant energy. `dt` in fs. Its steps between neighbour-list
    rebuilds can be replayed as a CUDA graph (`DomainConfig.cuda_graphs`)."""

    capturable = True
    required_fields = ("positions", "atomic_numbers", "atomic_masses", "velocities")

    def pre_update(self, batch: Batch) -> None:
        """Half kick, then drift."""
        dt = self.dt_internal
        velocities = batch.velocities + 0.5 * dt * _acceleration(batch)
        batch.velocities = velocities
        batch.positions = batch.positions + dt * velocities

    def post_update(self, batch: Batch) -> None:
        """Second half kick with the new forces."""
        batch.velocities = batch.velocities + 0.5 * self.dt_internal * _acceleration(batch)


class NVTLangevin(BaseDynamics):
    """Langevin thermostat, BAOAB splitting (kick, drift, friction + noise, drift, kick).

    The noise of each atom is a function of (seed, step, global atom id), so the trajectory
    is identical at any number of ranks; the step count it reads is `step_number`, so its
    steps between neighbour-list rebuilds can be replayed as a CUDA graph.

    Args:
        model: the model wrapper.
        dt: time step, fs.
        temperature: target temperature, K.
        friction: friction coefficient, 1/fs.
        seed: noise seed.
    """

    capturable = True
    required_fields = ("positions", "atomic_numbers", "atomic_masses", "velocities")

    def __init__(
        self,
        model: BaseModelMixin,
        dt: float,
        temperature: float,
        friction: float,
        seed: int = 0,
        hooks: Sequence[Hook] = (),
        skin: float = 0.0,
    ) -> None:
        super().__init__(model, dt, hooks, skin)
        if temperature < 0 or friction < 0:
            raise ValueError("temperature (K) and friction (1/fs) must be >= 0")
        self.temperature = float(temperature)
        self.friction = float(friction)
        self.seed = int(seed)

    def pre_update(self, batch: Batch) -> None:
        """B A O A: half kick, half drift, friction and noise, half drift."""
        dt = self.dt_internal
        velocities = batch.velocities + 0.5 * dt * _acceleration(batch)
        positions = batch.positions + 0.5 * dt * velocities
        c1 = math.exp(-self.friction * self.dt)
        kt = ase.units.kB * self.temperature
        sigma = torch.sqrt(kt / batch.atomic_masses).unsqueeze(-1)
        ids = batch.get("global_ids")
        if ids is None:
            ids = torch.arange(batch.num_nodes, device=batch.device)
        noise = counter_normal(self.seed, self.step_number, ids, velocities.dtype)
        velocities = c1 * velocities + math.sqrt(1.0 - c1 * c1) * sigma * noise
        batch.velocities = velocities
        batch.positions = positions + 0.5 * dt * velocities

    def graph_inputs(self) -> tuple[Any, ...]:
        """dt, the target temperature, the friction and the seed."""
        return (self.dt, self.temperature, self.friction, self.seed)

    def post_update(self, batch: Batch) -> None:
        """B: second half kick with the new forces."""
        batch.velocities = batch.velocities + 0.5 * self.dt_internal * _acceleration(batch)
