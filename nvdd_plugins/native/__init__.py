"""Native CPU kernels: plain C compiled on first use (about half a second, then cached) and
loaded with ctypes, for the hot loops of the CPU step: the neighbour list's periodic images,
bin grid and candidate scan, and the Lennard-Jones kernel. Every entry point returns None where
it does not apply, and its caller then runs its vectorised torch code (the same points and
edges in the same order; LJ sums equal to rounding)."""

from .build import cache_dir, native_enabled, native_library
from .kernels import (
    PairSearch,
    bin_grid_native,
    lennard_jones_native,
    neighbor_pairs_native,
    periodic_images_native,
)

__all__ = [
    "PairSearch",
    "bin_grid_native",
    "cache_dir",
    "lennard_jones_native",
    "native_enabled",
    "native_library",
    "neighbor_pairs_native",
    "periodic_images_native",
]
