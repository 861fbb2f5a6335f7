"""Output memory for the native kernels, used again once no tensor holds it.

A fresh buffer costs a page fault and the kernel's zeroing of every page the first time it is
written: for the neighbour search's outputs (tens of MB at a few thousand atoms) several ms
per rebuild, a rebuild every step at skin 0. A `BlockPool` hands out a block again once
nothing made from it is alive any more, so the kernel writes into memory already paged in.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch

from .build import native_library

__all__ = ["BlockPool"]

_HUGE_PAGE = 2 << 20
# Blocks kept per pool: the last search's outputs (still held by its view) and the next one's.
_KEPT = 2


class BlockPool:
    """Large output tensors for one kind of kernel output.

    Each block is a NumPy array, and every tensor made from it holds a reference to it
    (`torch.from_numpy`), so a block with no reference but the pool's is free: no tensor
    uses its memory. Thread-safe (simulated ranks are threads)."""

    def __init__(self) -> None:
        self._blocks: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, rows: int, columns: int, dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised (rows, columns) tensor; a large one starts on a 2 MiB boundary
        of a block that asked for huge pages (one fault per 2 MiB on first touch)."""
        nbytes = rows * columns * dtype.itemsize
        if nbytes < 2 * _HUGE_PAGE:
            return torch.empty(rows, columns, dtype=dtype)
        with self._lock:
            raw = torch.from_numpy(self._free_block(nbytes + _HUGE_PAGE))
        skip = -raw.data_ptr() % _HUGE_PAGE
        return raw[skip : skip + nbytes].view(dtype).view(rows, columns)

    def _free_block(self, size: int) -> np.ndarray:
        """A block of `size` to `2 size` bytes nothing uses, or a new one (with headroom for
        the next searches' sizes) that replaces the free ones."""
        in_use = []
        for index in range(len(self._blocks)):
            # references to a free block: the pool's list and getrefcount's argument
            if sys.getrefcount(self._blocks[index]) > 2:
                in_use.append(self._blocks[index])
            elif size <= self._blocks[index].nbytes <= 2 * size:
                return self._blocks[index]
        block = np.empty(size + size // 4, dtype=np.uint8)
        native_library().nvdd_advise_huge(block.ctypes.data, block.nbytes)
        self._blocks = [*in_use[-(_KEPT - 1) :], block]
        return block
