"""Communication: the communicator protocol and backends, halo plans and autograd primitives."""

from __future__ import annotations

from nvdd_plugins.comm.base import Communicator
from nvdd_plugins.comm.halo_plan import HaloPlan
from nvdd_plugins.comm.launch import (
    LaunchInfo,
    abort_job,
    detect_launch,
    end_job_on_exception,
    local_device,
    slurm_first_host,
)
from nvdd_plugins.comm.local import LocalCommunicator
from nvdd_plugins.comm.mpi import MPICommunicator
from nvdd_plugins.comm.primitives import (
    all_reduce_sum,
    fill_ghosts_,
    halo_forward,
    halo_forward_,
    halo_reverse,
)
from nvdd_plugins.comm.registered_ops import bind_slot, new_slot, release_slot, slot_binding
from nvdd_plugins.comm.resolve import resolve_communicator, set_default_communicator
from nvdd_plugins.comm.simulated import SimulatedCommunicator, SimulatedMesh, run_simulated
from nvdd_plugins.comm.torch_dist import TorchDistCommunicator

__all__ = [
    "Communicator",
    "HaloPlan",
    "LaunchInfo",
    "LocalCommunicator",
    "MPICommunicator",
    "SimulatedCommunicator",
    "SimulatedMesh",
    "TorchDistCommunicator",
    "abort_job",
    "all_reduce_sum",
    "bind_slot",
    "detect_launch",
    "end_job_on_exception",
    "fill_ghosts_",
    "halo_forward",
    "halo_forward_",
    "halo_reverse",
    "local_device",
    "new_slot",
    "release_slot",
    "resolve_communicator",
    "run_simulated",
    "set_default_communicator",
    "slot_binding",
    "slurm_first_host",
]
