#!/usr/bin/env bash
# Build LAMMPS 4Feb2025 with ML-IAP + ML-SNAP + PYTHON + MPI (no Kokkos) on a GPU machine that
# cannot download, from a carried source tarball; print the environment lines that make the
# `lammps` Python module importable:
#   eval "$(bash benchmarks/build_lammps_gpu.sh TARBALL [PREFIX])"   (default PREFIX /tmp/lmp)
# TARBALL: the LAMMPS 4Feb2025 source trimmed to cmake/, python/, src/ (top level, fmt, ML-IAP,
# ML-SNAP, PYTHON): about 3 MB. Takes about 45 s on 16 cores; a finished build is reused. The
# model's device is nvdd's business (MLIAPModel(device=...)); LAMMPS itself runs on the CPU.
set -euo pipefail
tarball="${1:?usage: build_lammps_gpu.sh TARBALL [PREFIX]}"
prefix="${2:-/tmp/lmp}"
src="$prefix/lammps-4Feb2025"
python="$(command -v python3)"
if [[ ! -f "$src/build/liblammps.so" ]]; then
    mkdir -p "$prefix"
    tar -xJf "$tarball" -C "$prefix"
    cmake -S "$src/cmake" -B "$src/build" -G Ninja -D CMAKE_BUILD_TYPE=Release \
        -D BUILD_SHARED_LIBS=ON -D BUILD_MPI=ON -D BUILD_OMP=OFF -D BUILD_TOOLS=OFF \
        -D PKG_ML-IAP=ON -D PKG_ML-SNAP=ON -D PKG_PYTHON=ON -D MLIAP_ENABLE_PYTHON=ON \
        -D WITH_JPEG=OFF -D WITH_PNG=OFF -D WITH_GZIP=OFF -D WITH_FFMPEG=OFF \
        -D DOWNLOAD_POTENTIALS=OFF -D Python_EXECUTABLE="$python" \
        -D Cythonize_EXECUTABLE="$(dirname "$python")/cythonize" >&2
    ninja -C "$src/build" -j "$(nproc)" >&2
fi
echo "export PYTHONPATH=$src/python\${PYTHONPATH:+:\$PYTHONPATH}"
echo "export LD_LIBRARY_PATH=$src/build\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export PATH=$src/build:\$PATH"
