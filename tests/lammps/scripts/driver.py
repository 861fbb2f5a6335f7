"""Run a LAMMPS input from Python with the handle attached by the driver.

    mpirun -n P python -m mpi4py tests/lammps/scripts/driver.py path/to/in.cases

The input runs in its own directory (relative file names resolve there).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lammps import lammps, mliap

import lammps_interface


def main(script: Path) -> None:
    """Open LAMMPS, enable ML-IAP Python models, attach the handle, run `script`."""
    os.chdir(script.parent)
    lmp = lammps(cmdargs=["-nocite", "-log", "none"])
    mliap.activate_mliappy(lmp)  # before `pair_style mliap unified`
    lammps_interface.attach(lmp)
    lmp.file(script.name)
    lmp.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
