"""Compile `nvdd_native.c` on first use and load it with ctypes.

The shared library is cached under `NVDD_CACHE_DIR` (default `~/.cache/nvdd`), keyed by the
source, the compiler and its flags, so a compile (well under a second) happens once per
machine. Without a C compiler, or with `NVDD_NATIVE=0`, `native_library()` is None and every
caller uses its vectorised torch code instead.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
from pathlib import Path

__all__ = ["cache_dir", "native_enabled", "native_library"]

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("nvdd_native.c")
# No -ffast-math and no contraction into fused multiply-adds: each operation rounds as
# torch's elementwise kernels round it.
FLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-std=c99")

_I64, _PTR = ctypes.c_int64, ctypes.c_void_p


def cache_dir() -> Path:
    """Where compiled libraries are kept: `NVDD_CACHE_DIR`, else `~/.cache/nvdd`."""
    configured = os.environ.get("NVDD_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "nvdd"


def native_enabled() -> bool:
    """Whether the native kernels may be used (`NVDD_NATIVE` is not "0") and load."""
    return os.environ.get("NVDD_NATIVE", "1") != "0" and native_library() is not None


def _declare(library: ctypes.CDLL) -> ctypes.CDLL:
    library.nvdd_advise_huge.restype = None
    library.nvdd_advise_huge.argtypes = [_PTR, _I64]
    for suffix, real in (("f64", ctypes.c_double), ("f32", ctypes.c_float)):
        images = getattr(library, f"nvdd_periodic_images_{suffix}")
        images.restype = _I64
        images.argtypes = [_I64, *[_PTR] * 12]
        grid = getattr(library, f"nvdd_bin_grid_{suffix}")
        grid.restype = _I64
        grid.argtypes = [_I64, _PTR, _I64, *[_PTR] * 4, *[_I64] * 4, real, *[_PTR] * 4]
        pairs = getattr(library, f"nvdd_neighbor_pairs_{suffix}")
        pairs.restype = _I64
        pairs.argtypes = [*[_I64] * 4, *[_PTR] * 10, real, real, *[_PTR] * 3]
        lj = getattr(library, f"nvdd_lennard_jones_{suffix}")
        lj.restype = _I64
        lj.argtypes = [_I64, _I64, *[_PTR] * 4, real, real, real, real, *[_PTR] * 3]
    return library


def _compile(compiler: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial")
    command = [compiler, *FLAGS, "-o", str(partial), str(SOURCE), "-lm"]
    subprocess.run(command, check=True, capture_output=True, text=True)
    os.replace(partial, target)  # atomic: ranks compiling at once each install a whole file


@functools.cache
def native_library() -> ctypes.CDLL | None:
    """The loaded library (compiled into the cache first if needed), or None when no C
    compiler is found or compiling or loading fails (logged once)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        logger.info("no C compiler found: nvdd's native CPU kernels are off")
        return None
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), compiler.encode(), " ".join(FLAGS).encode()):
        key.update(part)
    key.update(platform.machine().encode())
    target = cache_dir() / f"nvdd_native_{key.hexdigest()[:16]}.so"
    try:
        if not target.exists():
            _compile(compiler, target)
        return _declare(ctypes.CDLL(str(target)))
    except (OSError, subprocess.CalledProcessError, AttributeError) as err:
        detail = getattr(err, "stderr", "") or err
        logger.warning("nvdd's native CPU kernels are off (%s): %s", target, detail)
        return None
