"""Dynamics: `BaseDynamics`, the shipped integrators, stages, scopes and hooks."""

from __future__ import annotations

from nvdd_plugins.dynamics.base import BaseDynamics
from nvdd_plugins.dynamics.hooks import NeighborListHook, ThermoLogger, TrajectoryWriter
from nvdd_plugins.dynamics.integrators import NVE, NVTLangevin
from nvdd_plugins.dynamics.stages import DynamicsStage, Hook, HookContext, HookScope, due_hooks

__all__ = [
    "NVE",
    "BaseDynamics",
    "DynamicsStage",
    "Hook",
    "HookContext",
    "HookScope",
    "NVTLangevin",
    "NeighborListHook",
    "ThermoLogger",
    "TrajectoryWriter",
    "due_hooks",
]
