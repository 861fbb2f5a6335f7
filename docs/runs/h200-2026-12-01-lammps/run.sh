#!/usr/bin/env bash
# device run: install carried wheels, build LAMMPS, GPU tests, LAMMPS GPU benchmark
set -u
root=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
mkdir -p /tmp/site
if [[ ! -f /tmp/site/.done ]]; then
  tar -xJf .whl/ops/ops.tar.xz -C /tmp/site || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/rest/*.whl || exit 1
  touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site
eval "$(bash .gpu/nvdd/benchmarks/build_lammps_gpu.sh $root/.gpu/lammps-4Feb2025-trimmed.tar.xz 2>/tmp/build.log)" || { tail -30 /tmp/build.log; exit 1; }
cd .gpu/nvdd
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "import torch, lammps, mace, cuequivariance_ops_torch; from lammps import mliap; print('torch', torch.__version__, 'gpus', torch.cuda.device_count())"
echo "=== tests"
export MPLBACKEND=Agg
timeout ${TEST_LIMIT:-100} python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_lammps_gpu.py > $OUT/pytest_gpu.txt 2>&1; echo "pytest rc $?"; grep -E "^OK|passed|failed|Error" $OUT/pytest_gpu.txt | head -30
echo "=== benchmarks"
cd benchmarks
for step in "$@"; do
  case $step in
    compare) timeout 200 python3 lammps_gpu.py compare --atoms ${ATOMS:-10976 108000} --log-dir $OUT --json $OUT/lammps_gpu.json 2>&1 | grep -v Warning | tail -20 ;;
    mace) timeout 120 python3 lammps_gpu.py mace-mliap --atoms 10976 --steps 5 --backend e3nn --json $OUT/mace_mliap.json 2>&1 | tail -8 ;;
    np*) n=${step#np}; timeout 75 mpirun --allow-run-as-root --oversubscribe -n $n python3 -m mpi4py lammps_gpu.py lammps --atoms 108000 --json $OUT/lammps_np$n.json 2>&1 | grep -v Warning | tail -8 ;;
  esac
done
