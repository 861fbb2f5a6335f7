#!/usr/bin/env bash
# Install Open MPI (mpirun, mpicc) from Debian's apt when it is missing. LAMMPS and mpi4py
# must use this same MPI in one process. Needs root (or sudo) on a fresh machine.
set -euo pipefail
if command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "[install_mpi] installing Open MPI from apt"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
