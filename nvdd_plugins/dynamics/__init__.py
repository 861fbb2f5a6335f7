"""Dynamics: `BaseDynamics`, its `Evaluator`, the shipped integrators, stages and hooks."""

from __future__ import annotations

from nvdd_plugins.dynamics.base import (
    BaseDynamics,
    Evaluator,
    EvaluatorFactory,
    set_default_evaluator,
)
from nvdd_plugins.dynamics.fire import FIRE, FIRESettings
from nvdd_plugins.dynamics.fire_cell import VariableCellFIRE
from nvdd_plugins.dynamics.graph_capture import CapturedGraphs, ReplayedCalls
from nvdd_plugins.dynamics.graph_payoff import GraphPayoff
from nvdd_plugins.dynamics.graphed import FixedShapeEvaluator
from nvdd_plugins.dynamics.heat_flux import HeatFluxLogger
from nvdd_plugins.dynamics.hooks import NeighborListHook, ThermoLogger, TrajectoryWriter
from nvdd_plugins.dynamics.integrators import NVE, NVTLangevin
from nvdd_plugins.dynamics.mtk import NPH, NPT, MTKParameters
from nvdd_plugins.dynamics.nose_hoover import NoseHoover
from nvdd_plugins.dynamics.reduction import SumReducer, kinetic_partials, local_sums
from nvdd_plugins.dynamics.stages import (
    AttachedHook,
    DynamicsStage,
    Hook,
    HookContext,
    HookFunction,
)
from nvdd_plugins.dynamics.step_graph import CudaStepGraph, StepGraph

__all__ = [
    "FIRE",
    "NPH",
    "NPT",
    "NVE",
    "AttachedHook",
    "BaseDynamics",
    "CapturedGraphs",
    "CudaStepGraph",
    "DynamicsStage",
    "Evaluator",
    "EvaluatorFactory",
    "FIRESettings",
    "FixedShapeEvaluator",
    "GraphPayoff",
    "HeatFluxLogger",
    "Hook",
    "HookContext",
    "HookFunction",
    "MTKParameters",
    "NVTLangevin",
    "NeighborListHook",
    "NoseHoover",
    "ReplayedCalls",
    "StepGraph",
    "SumReducer",
    "ThermoLogger",
    "TrajectoryWriter",
    "VariableCellFIRE",
    "kinetic_partials",
    "local_sums",
    "set_default_evaluator",
]
