"""Communication: the communicator protocol and backends, halo plans, the halo exchange ops."""

from __future__ import annotations

from nvdd_plugins.comm.all_to_all import all_to_all_rows
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
    HaloSlot,
    all_reduce_sum,
    copy_to_ghosts,
    copy_to_ghosts_,
    fill_ghosts_,
    sum_ghosts_into_owners,
)
from nvdd_plugins.comm.resolve import resolve_communicator, set_default_communicator
from nvdd_plugins.comm.simulated import (
    CountingCommunicator,
    SimulatedCommunicator,
    SimulatedMesh,
    run_simulated,
)
from nvdd_plugins.comm.staging import Staging
from nvdd_plugins.comm.timed import TimedCommunicator, computing
from nvdd_plugins.comm.torch_dist import TorchDistCommunicator
from nvdd_plugins.comm.watchdog import collective_timeout_s, note_steps, set_collective_timeout

__all__ = [
    "Communicator",
    "CountingCommunicator",
    "HaloPlan",
    "HaloSlot",
    "LaunchInfo",
    "LocalCommunicator",
    "MPICommunicator",
    "SimulatedCommunicator",
    "SimulatedMesh",
    "Staging",
    "TimedCommunicator",
    "TorchDistCommunicator",
    "abort_job",
    "all_reduce_sum",
    "all_to_all_rows",
    "collective_timeout_s",
    "computing",
    "copy_to_ghosts",
    "copy_to_ghosts_",
    "detect_launch",
    "end_job_on_exception",
    "fill_ghosts_",
    "local_device",
    "note_steps",
    "resolve_communicator",
    "run_simulated",
    "set_collective_timeout",
    "set_default_communicator",
    "slurm_first_host",
    "sum_ghosts_into_owners",
]
