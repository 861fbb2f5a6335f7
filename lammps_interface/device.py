"""Which device a rank's model runs on: by default the rank's own GPU on its node.

`mpirun -n 4` on a node with 4 GPUs puts one rank on each: a rank's GPU is its rank among
the ranks of its node (MPI's shared-memory split) modulo the node's GPU count, so ranks
share GPUs round-robin when there are more ranks than GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["DeviceRequest", "choose_device", "node_local_rank", "parse_device", "resolve_device"]

DeviceRequest = str | torch.device | None
"""None (the rank's GPU if CUDA is present, else the CPU), "cpu", "cuda" (the rank's GPU),
"cuda:K" or a `torch.device`."""


def parse_device(request: DeviceRequest) -> str | None:
    """The request as a string to store (a model file must not hold a CUDA object), checked:
    a ValueError names what is accepted."""
    if request is None:
        return None
    try:
        device = torch.device(request)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"device must be None, 'cpu', 'cuda' or 'cuda:K', got {request!r} ({err})"
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:K', got {request!r}")
    return str(device)


def choose_device(
    request: str | None, cuda_count: int, local_rank: Callable[[], int]
) -> torch.device:
    """The device for `request` (a `parse_device` result) on a node with `cuda_count` GPUs;
    `local_rank()` (called only when a GPU must be picked) gives the rank's place on its node."""
    if request is None:
        if cuda_count == 0:
            return torch.device("cpu")
        request = "cuda"
    device = torch.device(request)
    if device.type == "cpu":
        return device
    if cuda_count == 0:
        raise ValueError(
            f"device {request!r} was asked for but this process sees no CUDA device: "
            "use device='cpu', or leave it unset to take a GPU when there is one"
        )
    if device.index is None:
        return torch.device("cuda", local_rank() % cuda_count)
    if device.index >= cuda_count:
        raise ValueError(f"device {request!r} asked for, but this node has {cuda_count} GPU(s)")
    return device


def node_local_rank(comm: Any) -> int:
    """This process's rank among the ranks of `comm` (an mpi4py communicator) that share
    its node."""
    from mpi4py import MPI  # imported on use: importing mpi4py initialises MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return int(node.Get_rank())
    finally:
        node.Free()


def resolve_device(request: str | None, comm: Any) -> torch.device:
    """`choose_device` with this node's CUDA device count and this rank's place on the node
    among the ranks of `comm` (collective over `comm` when a GPU is picked by rank)."""
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return choose_device(request, cuda_count, lambda: node_local_rank(comm))
