#!/usr/bin/env bash
# On the GPU machine (no TVM there): install the carried wheels, then run GPU checks and benchmarks
# on the artifacts built here by scripts/gpu_build.py and benchmarks/*build*.  Logs and JSON go
# to $OUT (the device tool brings them back).
#   bash scripts/gpu_run.sh single        one-GPU checks (tests/gpu/run_all.py)
#   bash scripts/gpu_run.sh dist          multi-GPU checks under torchrun, one process per GPU
#   bash scripts/gpu_run.sh bench-rs      benchmarks/gemm_rs.py (side by side with torch, NCCL, symm_mem)
#   bash scripts/gpu_run.sh all           all three
#   bash scripts/gpu_run.sh moe           MoE: its GPU checks, the per-stage timings of every configuration and
#                                         variant (benchmarks/moe_stages.py), then benchmarks/moe.py with the peers
#                                         (build first: scripts/gpu_build.py --match 'moe_',
#                                          benchmarks/build_moe.py --wheels DIR; carry .carry and .whl)
#   bash scripts/gpu_run.sh fp8           FP8: its GPU checks and the runtime's wait-timeout cases, then
#                                         benchmarks/gemm_fp8.py with the peers (FP8_ARGS: more arguments)
#                                         (build first: scripts/gpu_build.py --match 'gemm_fp8_|.*_timeout$',
#                                          benchmarks/build_gemm_fp8.py; carry .carry and .whl)
#   bash scripts/gpu_run.sh moe-profile   ncu (clocks left alone) of axe's grouped GEMMs (PROF_VARIANT: the tags,
#                                         default small_gather; PROF_KERNELS: a regex, default moe_gemm; PROF_COUNT)
#                                         and SGLang's fused_moe_kernel (PROF_SGLANG=0: not) at PROF_T tokens (32)
#   bash scripts/gpu_run.sh sanitize      one-GPU checks under compute-sanitizer (4 tools side by side; table)
#   bash scripts/gpu_run.sh sanitize-dist multi-GPU checks under compute-sanitizer (SAN_TOOLS picks the tools)
# Device tool: command "bash scripts/gpu_run.sh dist", carry [".carry", ".whl"].
set -uo pipefail
# NVLink multicast stays off on the shared machines: these are only ever set to their safe values
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/axe-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
NGPU=$(nvidia-smi -L | wc -l)
echo "== $(date -Is) $NGPU GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
rc=0
run() {   # run LOGNAME CMD...: the command's output to the terminal and $OUT/LOGNAME; failures set rc
  local log=$1; shift; echo "== $*"
  "$@" 2>&1 | tee "$OUT/$log"; [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
}
what=${1:-all}
if [[ $what == single || $what == all ]]; then
  run run_all.log timeout 540 python3 tests/gpu/run_all.py
fi
if [[ ($what == dist || $what == all) && $NGPU -ge 2 ]]; then
  run run_dist.log timeout ${DIST_TIMEOUT:-400} torchrun --nproc-per-node "$NGPU" tests/gpu/run_dist.py ${DIST_ARGS:-}
fi
if [[ ($what == bench-rs || $what == all) && $NGPU -ge 2 ]]; then
  run gemm_rs.log timeout ${BENCH_TIMEOUT:-500} torchrun --nproc-per-node "$NGPU" benchmarks/gemm_rs.py run --json "$OUT/gemm_rs.json" ${BENCH_ARGS:-}
fi
if [[ $what == moe ]]; then
  # the fused kernels last and apart: a wait of theirs that times out traps and ends its process's CUDA context
  run moe_checks.log timeout 300 python3 tests/gpu/run_all.py --only $(ls .carry/artifacts | grep '^moe_' | grep -v fused)
  run moe_fused_checks.log timeout 200 python3 tests/gpu/run_all.py --only $(ls .carry/artifacts | grep '^moe_experts_')
  run moe_stages.log timeout 300 python3 benchmarks/moe_stages.py --out "$OUT/moe-stages.json"
  # per T the fastest configuration of the stage timings above, side by side with the peers
  run moe.log timeout 400 python3 benchmarks/moe.py --configs-from "$OUT/moe-stages.json" --out "$OUT/moe.json" ${MOE_ARGS:-}
fi
if [[ $what == fp8 ]]; then
  run fp8_checks.log timeout 300 python3 tests/gpu/run_all.py --only $(ls .carry/artifacts | grep -E '^gemm_fp8_|_timeout$')
  run gemm_fp8.log timeout ${FP8_TIMEOUT:-400} python3 benchmarks/gemm_fp8.py --peers cublas triton --json "$OUT/gemm_fp8.json" ${FP8_ARGS:-}
fi
if [[ $what == moe-profile ]]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
  # --clock-control none: the GPU's clocks are not ours to lock
  run ncu_axe.log timeout 200 "$NCU" --clock-control none -k regex:"${PROF_KERNELS:-moe_gemm}" -c ${PROF_COUNT:-2} $sections \
    ${PROF_NCU_ARGS:-} python3 benchmarks/moe_stages.py --tokens ${PROF_T:-32} --variants ${PROF_VARIANT:-small_gather} \
    --reps 1 --out /tmp/prof-stages.json
  [[ ${PROF_SGLANG:-1} == 1 ]] && run ncu_sglang.log timeout 200 "$NCU" --clock-control none -k regex:fused_moe_kernel -c 2 $sections python3 benchmarks/moe.py \
    --tokens ${PROF_T:-32} --config small_gather --reps 1 --out /tmp/prof-moe.json
fi
if [[ $what == sanitize ]]; then
  run sanitize.log python3 tests/gpu/sanitize.py --out "$OUT" --limit ${SAN_LIMIT:-520} ${SAN_TOOLS:+--tools $SAN_TOOLS} ${SAN_ARGS:-}
fi
if [[ $what == sanitize-dist && $NGPU -ge 2 ]]; then
  run sanitize-dist.log python3 tests/gpu/sanitize.py --dist --out "$OUT" --limit ${SAN_LIMIT:-520} ${SAN_TOOLS:+--tools $SAN_TOOLS} ${SAN_ARGS:-}
fi
exit $rc
