"""Launching LAMMPS for tests: the `lmp` binary under `mpirun`, with a hard timeout."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from tests.helpers.multiprocess import run_command

LMP = Path(sys.executable).parent / "lmp"


def missing_lammps() -> str | None:
    """Why the LAMMPS tests cannot run here, or None."""
    if importlib.util.find_spec("lammps") is None:
        return "the `lammps` Python module is not installed (scripts/install_lammps.sh)"
    if importlib.util.find_spec("lammps.mliap") is None:
        return "the installed `lammps` module has no ML-IAP Python coupling"
    if not LMP.exists():
        return f"{LMP} is missing (scripts/install_lammps.sh installs it next to python)"
    if shutil.which("mpirun") is None:
        return "mpirun is not on PATH"
    return None


def run_lmp(n_ranks: int, script: Path, cwd: Path, timeout: float = 240.0) -> tuple[int, str]:
    """`mpirun -n N lmp -in script` in `cwd`: exit code and output."""
    command = [
        "mpirun",
        "-n",
        str(n_ranks),
        str(LMP),
        "-nocite",
        "-log",
        "none",
        "-in",
        str(script),
    ]
    return run_command(command, cwd, timeout)
