"""Communication: the communicator protocol and backends, halo plans and autograd primitives."""

from __future__ import annotations

from nvdd_plugins.comm.base import Communicator
from nvdd_plugins.comm.halo_plan import HaloPlan
from nvdd_plugins.comm.primitives import (
    all_reduce_sum,
    fill_ghosts_,
    halo_forward,
    halo_forward_,
    halo_reverse,
)
from nvdd_plugins.comm.simulated import SimulatedCommunicator, SimulatedMesh, run_simulated

__all__ = [
    "Communicator",
    "HaloPlan",
    "SimulatedCommunicator",
    "SimulatedMesh",
    "all_reduce_sum",
    "fill_ghosts_",
    "halo_forward",
    "halo_forward_",
    "halo_reverse",
    "run_simulated",
]
