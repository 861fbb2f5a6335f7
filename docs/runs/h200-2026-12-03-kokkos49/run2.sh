#!/usr/bin/env bash
# kokkos49 second device run (what was left of the helper's device budget): `compare` at
# 10,976 and then 108,000 atoms with `neigh_modify exclude group all all`, after the fix that lets
# the LAMMPS layout's model call be captured (the first run's capture failed on a host
# scalar copied into the ghost rows, and its 1-rank LAMMPS runs stopped at the first step).
set -u
root=$(pwd)
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True MPLBACKEND=Agg
t0=$SECONDS
wheels=$root/.dev/k49whl
mkdir -p /tmp/site
tar -xJf "$wheels/ops.tar.xz" -C /tmp/site || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl || exit 1
export PYTHONPATH=/tmp/site
tree=$root/.dev/kokkos49
bash "$tree/benchmarks/build_lammps_gpu.sh" "$wheels/lammps-4Feb2025-trimmed.tar.xz" \
    > /tmp/lammps.env 2> /tmp/build.log || { tail -30 /tmp/build.log; exit 1; }
eval "$(cat /tmp/lammps.env)"
echo "install + lammps build $((SECONDS - t0)) s"
cd "$tree/benchmarks"
export PYTHONPATH=$tree:$PYTHONPATH
timeout "${COMPARE_LIMIT:-110}" python3 lammps_gpu.py compare --atoms 10976 108000 \
    --variants exclude --steps 25 --repeats 3 --json "$OUT/lammps_gpu.json" 2>&1 \
    | grep -Ev "Warning|warn|visitor|_Jd"
echo "done $((SECONDS - t0)) s"
