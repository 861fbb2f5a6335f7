"""Host <-> device copies through reused pinned buffers (LAMMPS's arrays, MPI messages).

Each array goes to the device in one copy and each result comes back in one copy. On a GPU
the host side is a page-locked buffer per name, kept between calls and grown only when a
call needs more rows (the device copy then runs at full link speed, with no staging inside
the CUDA driver). On the CPU arrays are copied once into tensors.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["Staging"]

_GROWTH = 1.25  # headroom when a buffer grows, so atoms drifting between ranks rarely regrow it


class Staging:
    """Named host buffers for one device.

    Args:
        device: where the model computes.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned = device.type == "cuda"
        self._buffers: dict[str, torch.Tensor] = {}

    def to_device(self, name: str, array: np.ndarray) -> torch.Tensor:
        """`array` as a tensor on the device (always a copy: the caller may reuse its
        memory); the dtype is kept."""
        host = np.ascontiguousarray(array)
        if not self._pinned:
            return torch.from_numpy(host.copy())
        dtype = torch.from_numpy(np.empty(0, host.dtype)).dtype
        buffer = self.host_buffer(name, dtype, host.shape)
        buffer.numpy()[...] = host
        return buffer.to(self.device)  # blocking: the buffer is refilled by the next call

    def to_host(self, name: str, tensor: torch.Tensor) -> np.ndarray:
        """`tensor` as a numpy array on the host, valid until the next call with `name`."""
        tensor = tensor.detach()
        if not self._pinned or tensor.device.type != "cuda":
            return np.ascontiguousarray(tensor.cpu().numpy())
        buffer = self.host_buffer(name, tensor.dtype, tuple(tensor.shape))
        buffer.copy_(tensor)
        return buffer.numpy()

    def host_buffer(self, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """A host tensor of `shape` from the buffer kept under `name` (grown if too small;
        pinned for a GPU), valid until the next call with `name`."""
        size = int(np.prod(shape))
        kept = self._buffers.get(name)
        if kept is None or kept.dtype != dtype or kept.numel() < size:
            kept = torch.empty(int(size * _GROWTH) + 1, dtype=dtype, pin_memory=self._pinned)
            self._buffers[name] = kept
        return kept[:size].view(shape)
