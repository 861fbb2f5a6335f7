#!/usr/bin/env bash
# lgpu device run: install carried wheels, build LAMMPS, then the steps named as arguments
set -u
root=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
t0=$SECONDS
mkdir -p /tmp/site
if [[ ! -f /tmp/site/.done ]]; then
  tar -xJf .whl/ops/ops.tar.xz -C /tmp/site || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/rest/*.whl || exit 1
  touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site
echo "install $((SECONDS-t0)) s"
eval "$(bash .gpu/lgpu/benchmarks/build_lammps_gpu.sh $root/.gpu/lammps-4Feb2025-trimmed.tar.xz 2>/tmp/build.log)" || { tail -30 /tmp/build.log; exit 1; }
echo "lammps build $((SECONDS-t0)) s"
cd .gpu/lgpu
export PYTHONPATH=$PWD:$PYTHONPATH MPLBACKEND=Agg
for step in "$@"; do
  echo "=== $step $((SECONDS-t0)) s"
  case $step in
    diag2_*) timeout 300 python3 diag2.py ${step#diag2_} 2>&1 | grep -v -i "warn\|visitor" | tail -40 ;;
    diag*) timeout 240 python3 diag.py ${step#diag} 2>&1 | grep -v -i "warn\|visitor" | tail -40 ;;
    tests) timeout ${TEST_LIMIT:-150} python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_lammps_gpu.py > $OUT/pytest_gpu.txt 2>&1; echo "pytest rc $?"; grep -E "^OK|passed|failed|Error" $OUT/pytest_gpu.txt | head -30 ;;
    compare) (cd benchmarks && timeout 260 python3 lammps_gpu.py compare --atoms ${ATOMS:-10976 108000} --log-dir $OUT --json $OUT/lammps_gpu.json 2>&1 | grep -v Warning | tail -20) ;;
    np*) n=${step#np}; (cd benchmarks && timeout 90 mpirun --allow-run-as-root --oversubscribe -n $n python3 -m mpi4py lammps_gpu.py lammps --atoms 108000 --json $OUT/lammps_np$n.json 2>&1 | grep -v Warning | tail -8) ;;
  esac
done
echo "done $((SECONDS-t0)) s"
