"""Turn what a user passes as `mesh` into a `Communicator`."""

from __future__ import annotations

import logging
from typing import Any

import torch.distributed as dist

from nvdd_plugins.comm.base import Communicator
from nvdd_plugins.comm.launch import detect_launch
from nvdd_plugins.comm.local import LocalCommunicator
from nvdd_plugins.comm.mpi import MPICommunicator
from nvdd_plugins.comm.torch_dist import TorchDistCommunicator

__all__ = ["resolve_communicator", "set_default_communicator"]

logger = logging.getLogger(__name__)

_DEFAULT: Communicator | None = None


def set_default_communicator(comm: Communicator | None) -> None:
    """Register the communicator `mesh=None` resolves to (set by `DistributedManager`)."""
    global _DEFAULT
    _DEFAULT = comm


def resolve_communicator(mesh: Any) -> Communicator:
    """A `Communicator` for `mesh`.

    Accepts a `Communicator`, an mpi4py communicator, a torch process group or DeviceMesh,
    or None: the registered default, else the torch.distributed world when initialised,
    else a single local rank. A one-rank result for None inside a multi-process launch is
    logged as a warning: every process would then compute the whole system on its own (a
    one-rank group passed explicitly, e.g. a pipeline stage of one rank, is deliberate).
    """
    comm = _resolved(mesh)
    launch = detect_launch()
    if mesh is None and comm.size == 1 and launch.world_size > 1:
        logger.warning(
            "process %d of %d (%s) decomposes over a one-rank mesh, so every process computes "
            "the whole system alone: call DistributedManager.initialize() first, or pass "
            "mesh=manager.mesh (ASE: comm=MPI.COMM_WORLD)",
            launch.rank,
            launch.world_size,
            launch.launcher,
        )
    return comm


def _resolved(mesh: Any) -> Communicator:
    if isinstance(mesh, Communicator):
        return mesh
    if getattr(mesh, "ndim", 1) != 1:
        names = getattr(mesh, "mesh_dim_names", None)
        raise ValueError(
            f"a {mesh.ndim}-D mesh (dimensions {names}) was passed where one "
            "domain-decomposition group is expected: pass its 1-D sub-mesh (e.g. "
            "mesh['domain'] of a DeviceMesh), or run stages over a (pipeline, domain) mesh "
            "with nvdd_plugins.parallel.DomainPipeline"
        )
    if mesh is None:
        if _DEFAULT is not None:
            return _DEFAULT
        if dist.is_available() and dist.is_initialized():
            return TorchDistCommunicator()
        return LocalCommunicator()
    if type(mesh).__module__.startswith("mpi4py"):
        return MPICommunicator(mesh)
    if hasattr(mesh, "get_group"):
        return TorchDistCommunicator(mesh.get_group())
    if isinstance(mesh, dist.ProcessGroup):
        return TorchDistCommunicator(mesh)
    raise TypeError(
        f"cannot use {type(mesh).__name__} as a mesh: pass a Communicator, an mpi4py "
        "communicator, a torch.distributed process group or DeviceMesh, or None"
    )
