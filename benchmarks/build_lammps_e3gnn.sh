#!/usr/bin/env bash
# Build LAMMPS 4Feb2025 with sevenn's pair styles (e3gnn, e3gnn/parallel) linked to the libtorch
# of python3's torch, and ML-IAP + ML-SNAP + PYTHON + MPI, so that one `lmp` / liblammps runs
# both `pair_style e3gnn/parallel` and `pair_style mliap unified` (nvdd); print the environment
# lines that put that `lmp` and its `lammps` Python module first:
#   eval "$(bash benchmarks/build_lammps_e3gnn.sh TARBALL [PREFIX])"   (default /tmp/lmp-e3gnn)
# TARBALL: the trimmed LAMMPS 4Feb2025 source tarball (cmake/, python/, src/ top level, fmt,
# ML-IAP, ML-SNAP, PYTHON). Needs python3 with torch and sevenn (its wheel ships the pair
# styles' sources), cmake, ninja, MPI and the CUDA toolkit's headers and libcudart (sevenn's
# e3gnn/parallel calls the CUDA runtime even when torch has no CUDA). JOBS (default: nproc)
# sets the build's parallel jobs. A finished build is reused; about 4 minutes with 2 jobs.
#
# sevenn's own patch_lammps.sh targets LAMMPS 2Aug2023: it replaces src/comm_brick.* with its
# 2Aug2023 copy, whose overrides no longer match 4Feb2025's Comm (forward_comm(Pair *, int)).
# So this script applies its e3gnn steps by hand and leaves D3 out (its .cu needs nvcc):
# copy pair_e3gnn*.{cpp,h}; add to 4Feb2025's CommBrick only the two methods sevenn adds,
# forward_comm/reverse_comm(PairE3GNNParallel *), taken from sevenn's comm_brick.cpp; append
# libtorch (and libcudart) to cmake/CMakeLists.txt; C++17.
set -euo pipefail
tarball="${1:?usage: build_lammps_e3gnn.sh TARBALL [PREFIX]}"
prefix="${2:-/tmp/lmp-e3gnn}"
src="$prefix/lammps-4Feb2025"
python="$(command -v python3)"
jobs="${JOBS:-$(nproc)}"

patch_e3gnn() {
    local pair lsrc="$src/src"
    pair="$("$python" -c 'import os, sevenn; print(os.path.dirname(sevenn.__file__))')/pair_e3gnn"
    cp "$pair"/pair_e3gnn{,_parallel}.{cpp,h} "$pair/pair_e3gnn_oeq_autograd.cpp" "$lsrc/"
    sed -i '/void forward_comm_array(int, double \*\*) override;/a\
  void forward_comm(class PairE3GNNParallel *);    // sevenn e3gnn/parallel\
  void reverse_comm(class PairE3GNNParallel *);    // sevenn e3gnn/parallel' "$lsrc/comm_brick.h"
    grep -q PairE3GNNParallel "$lsrc/comm_brick.h"
    sed -i 's/#include "comm_brick.h"/&\n#include "pair_e3gnn_parallel.h"/' "$lsrc/comm_brick.cpp"
    # the two definitions: from forward_comm(PairE3GNNParallel *) to the end of the second body
    awk '/^void CommBrick::forward_comm\(PairE3GNNParallel \*pair\)/ {on = 1}
         on {print} on && /^}/ && ++ends == 2 {exit}' "$pair/comm_brick.cpp" >>"$lsrc/comm_brick.cpp"
    grep -q 'CommBrick::reverse_comm(PairE3GNNParallel' "$lsrc/comm_brick.cpp"
    cat >>"$src/cmake/CMakeLists.txt" <<'EOF'

find_package(Torch REQUIRED)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${TORCH_CXX_FLAGS}")
target_link_libraries(lammps PUBLIC "${TORCH_LIBRARIES}" CUDA::cudart)
EOF
}

if [[ ! -f "$src/build/liblammps.so" || ! -x "$src/build/lmp" ]]; then
    mkdir -p "$prefix"
    tar -xJf "$tarball" -C "$prefix"
    patch_e3gnn
    torch_prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    cythonize="$(dirname "$python")/cythonize"
    [[ -x "$cythonize" ]] || cythonize="$(command -v cythonize)"
    # torch's CMake files want MKL's headers, which its wheels do not ship; any folder will do
    cmake -S "$src/cmake" -B "$src/build" -G Ninja -D CMAKE_BUILD_TYPE=Release \
        -D CMAKE_CXX_STANDARD=17 -D CMAKE_PREFIX_PATH="$torch_prefix" \
        -D MKL_INCLUDE_DIR="$(dirname "$torch_prefix")/../include" \
        -D BUILD_SHARED_LIBS=ON -D BUILD_MPI=ON -D BUILD_OMP=OFF -D BUILD_TOOLS=OFF \
        -D PKG_ML-IAP=ON -D PKG_ML-SNAP=ON -D PKG_PYTHON=ON -D MLIAP_ENABLE_PYTHON=ON \
        -D WITH_JPEG=OFF -D WITH_PNG=OFF -D WITH_GZIP=OFF -D WITH_FFMPEG=OFF \
        -D DOWNLOAD_POTENTIALS=OFF -D Python_EXECUTABLE="$python" \
        -D Cythonize_EXECUTABLE="$cythonize" >&2
    ninja -C "$src/build" -j "$jobs" >&2
fi
echo "export PYTHONPATH=$src/python\${PYTHONPATH:+:\$PYTHONPATH}"
echo "export LD_LIBRARY_PATH=$src/build\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export PATH=$src/build:\$PATH"
