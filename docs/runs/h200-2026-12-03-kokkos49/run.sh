#!/usr/bin/env bash
# kokkos49 device run (one H200): install the carried wheels (cuEq ops as one xz tarball),
# build LAMMPS 4Feb2025 (no Kokkos), the GPU tests of the LAMMPS bridge, `compare` at
# 108,000 and 10,976 atoms (each with and without `neigh_modify exclude group all all`),
# then 1 and 4 ranks sharing the GPU at 108,000 atoms.
#   run from the main checkout's root with .dev/kokkos49 (this tree) and .dev/k49whl carried
set -u
root=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export MPLBACKEND=Agg
t0=$SECONDS
wheels=$root/.dev/k49whl
mkdir -p /tmp/site "$OUT/lammps"
tar -xJf "$wheels/ops.tar.xz" -C /tmp/site || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl || exit 1
export PYTHONPATH=/tmp/site
echo "install $((SECONDS - t0)) s"
tree=$root/.dev/kokkos49
bash "$tree/benchmarks/build_lammps_gpu.sh" "$wheels/lammps-4Feb2025-trimmed.tar.xz" \
    > /tmp/lammps.env 2> /tmp/build.log || { tail -30 /tmp/build.log; exit 1; }
eval "$(cat /tmp/lammps.env)"
echo "lammps build $((SECONDS - t0)) s"
cd "$tree"
export PYTHONPATH=$PWD:$PYTHONPATH
t=tests/gpu/test_lammps_gpu.py
timeout 150 python3 -m pytest -q -p no:cacheprovider "$t::test_lammps_on_the_gpu_equals_the_cpu_run[2]" \
    "$t::test_lammps_md_replayed_from_cuda_graphs_equals_eager" 2>&1 \
    | grep -Ev "Warning|warn" | tail -6
echo "=== gpu tests done $((SECONDS - t0)) s"
cd benchmarks
timeout 240 python3 lammps_gpu.py compare --atoms 108000 10976 --repeats 5 --log-dir "$OUT/lammps" \
    --json "$OUT/lammps_gpu.json" 2>&1 | grep -Ev "Warning|warn|visitor" | tail -8
echo "=== compare done $((SECONDS - t0)) s"
for ranks in 1 4; do
    left=$((470 - (SECONDS - t0)))
    ((left > 40)) || break
    timeout $left mpirun -n $ranks python3 -m mpi4py lammps_gpu.py lammps --atoms 108000 \
        --exclude-pairs --json "$OUT/lammps_np$ranks.json" 2>&1 | grep -Ev "Warning|warn|visitor" | tail -3
    echo "=== np$ranks done $((SECONDS - t0)) s"
done
tar -czf "$OUT/lammps_logs.tar.gz" -C "$OUT" lammps && rm -rf "$OUT/lammps"
echo "done $((SECONDS - t0)) s"
