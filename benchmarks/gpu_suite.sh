#!/usr/bin/env bash
# Every GPU figure in docs/benchmarks.md (the cueq_multi and cueq_largest steps need two GPUs):
#   bash benchmarks/gpu_suite.sh OUT_DIR [STEP ...]      (default: all steps)
# Each step has its own time limit and writes OUT_DIR/<step>.txt and .json; a failing step
# does not stop the others.
set -u
out="${1:?usage: gpu_suite.sh OUT_DIR [STEP ...]}"
shift
wanted=" ${*:-all} "
mkdir -p "$out"
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
quiet='Warning|visitor|atomic_numbers|_Jd|warnings.warn|np.reshape'

step() {
    local name=$1 limit=$2
    shift 2
    [[ "$wanted" == " all " || "$wanted" == *" $name "* ]] || return 0
    echo "=== $name: $*"
    timeout "$limit" ${launch:-} python3 "$@" --json "$out/$name.json" 2>&1 | grep -Ev "$quiet" | tee "$out/$name.txt"
}

step neighbor_list 120 neighbor_list.py --sizes 10000 100000 500000 1000000 --device cuda \
    --dtype float32 --repeats 10
step overhead_lj 120 distributed_overhead.py --models lj --sizes 100000 500000 --device cuda \
    --dtype float32 --repeats 20 --ranks 2 4 8
step profile_lj 120 distributed_overhead.py --models lj --sizes 100000 --device cuda \
    --dtype float32 --repeats 3 --ranks --profile
step overhead_mace 200 distributed_overhead.py --models mace --sizes 100000 --device cuda \
    --dtype float32 --repeats 3 --ranks
step compile_mace 300 distributed_overhead.py --models mace --sizes 10000 --device cuda \
    --dtype float32 --repeats 10 --compile --ranks
# compile=True against eager (with and without CUDA graphs), MACE cuEq: 200 steps at 11k for
# the recompile count over several rebuilds; the first step at 108k with nvdd first in a fresh
# process and a fresh cuEquivariance kernel cache
step compiled_md_small 300 compiled_md_step.py --atoms 10976 --steps 200 \
    --modes eager+auto compiled compiled+auto
step compiled_md_large 300 compiled_md_step.py --atoms 108000 --steps 20 \
    --modes eager+auto compiled compiled+auto
CUEQUIVARIANCE_OPS_NVRTC_CACHE_DIR=$(mktemp -d) step first_step_nvdd_first 200 first_step.py \
    --atoms 108000 --order nvdd,plain
# the same with mace-torch's own first call first (the figure the first step is held against)
CUEQUIVARIANCE_OPS_NVRTC_CACHE_DIR=$(mktemp -d) step first_step_plain_first 200 first_step.py \
    --atoms 108000 --order plain,nvdd --profile-first 40
# where compiled loses at 108k: torch.profiler tables of two steps per mode
step compiled_md_profile 300 compiled_md_step.py --atoms 108000 --steps 10 --warmup 5 \
    --modes eager+auto compiled --profile 2
# AIMNet2 compiled against eager (needs aimnet, nvalchemi-toolkit-ops and warp-lang)
step compiled_aimnet2 300 compiled_md_step.py --model aimnet2 --atoms 10000 --steps 50 \
    --modes eager+auto compiled compiled+auto
step mace_scaling 240 mace_scaling.py --device cuda --sizes 10000 100000 --largest
step halo_exchange 180 halo_exchange.py --model mace --atoms 20000 --device cuda --steps 5
# MACE + cuEquivariance (needs cuequivariance-torch and its cu13 ops importable)
step cueq_single 300 mace_cueq.py single --cases small:10976 small:108000 medium:32000 --e3nn \
    --float64-check --repeats 10
# where DD@1's extra time per step goes: GPU busy vs idle gaps, plain mace-torch beside
step step_gaps 150 step_gaps.py --atoms 10976 --skin 0 --backend e3nn --calls 2
step cueq_multi 420 -m torch.distributed.run --standalone --nproc_per_node=2 mace_cueq.py multi \
    --per-gpu 108000 --strong 216000
step cueq_largest 300 -m torch.distributed.run --standalone --nproc_per_node=2 mace_cueq.py \
    multi --largest 1200000 --repeats 2
step cueq_plain_largest 400 mace_cueq.py plain --cases small:595508 small:665500 small:704969 \
    --repeats 2
# graph partition vs halo on two GPUs (NCCL), MACE small, float32
step graph_vs_halo 300 -m torch.distributed.run --standalone --nproc_per_node=2 graph_vs_halo.py \
    --device cuda --model mace --preset small --atoms 32000 --repeats 10
# one GPU beyond its memory: sub-domains in chunks (ChunkedEvaluator) against plain mace-torch
# at its largest; then chunks inside the ranks of a 2-GPU run (DomainConfig(chunk_atoms="auto"))
step chunked_e3nn 300 chunked_mace.py --backend e3nn --plain 157216 --atoms 636056 --repeats 2
step chunked_medium 300 chunked_mace.py --backend e3nn --preset medium --plain 42592 \
    --atoms 165888 --repeats 2
step chunked_cueq 300 chunked_mace.py --plain 629856 --atoms 2515456 --repeats 2 --verbose
step chunked_multi 300 -m torch.distributed.run --standalone --nproc_per_node=2 mace_cueq.py \
    multi --largest 2515456 --chunk-atoms auto --repeats 2 --verbose
# LAMMPS + nvdd on the GPU against DomainParallel and plain cuEq (each LAMMPS input with and
# without `neigh_modify exclude group all all`); LAMMPS is built first from the trimmed source
# tarball in $LAMMPS_TARBALL (build_lammps_gpu.sh), the steps skipped without it
if [[ -n "${LAMMPS_TARBALL:-}" ]] && eval "$(bash build_lammps_gpu.sh "$LAMMPS_TARBALL")"; then
    step lammps_gpu 480 lammps_gpu.py compare --atoms 10976 108000
    step lammps_mace_mliap 200 lammps_gpu.py mace-mliap --atoms 10976 --steps 5
    for ranks in 1 4 8; do  # MPI ranks sharing the one GPU, each with its LAMMPS sub-domain
        launch="mpirun --allow-run-as-root --oversubscribe -n $ranks" \
            step "lammps_np$ranks" 300 -m mpi4py lammps_gpu.py lammps --atoms 108000 --exclude-pairs
    done
fi
