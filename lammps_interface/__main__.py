"""Entry point of `python -m lammps_interface` (see `lammps_interface.cli`)."""

from lammps_interface.cli import main

main()
