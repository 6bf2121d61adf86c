#!/usr/bin/env bash
# Issue 25's MoE record, one device call: the MoE CUDA tests, then a random
# Qwen3.5-35B-A3B q4 checkpoint written here (`nextn make-checkpoint`, never
# committed): greedy decode against its active-bytes roofline (bench decode
# --breakdown), MTP rounds at K = 2, 3, 4 against a decode step, and the
# oracle at per-position acceptance 0.9 / 0.8 / 0.7 at the MTP head's cost
# against plain greedy (generate --json, the same budget).
#
#   scripts/device/prepare.sh     # here: builds build-cuda/
#   device run, carry [build-cuda.tar.xz]:
#     bash scripts/device/moe_record.sh
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_BENCH_BUDGET seconds (540),
# NEXTN_CK_DIR (/tmp/nextn-ck), NEXTN_MOE_PRESETS ("35b-a3b"; a Qwen3.5 MoE
# preset without its "qwen3.5-", or gemma4-26b-a4b), NEXTN_MOE_MEMORY_PRESETS
# (none; Qwen3.5 presets run from host memory, e.g. "122b-a10b"; last),
# NEXTN_MOE_VERIFY=1 (the verify arms on each Qwen3.5 preset),
# NEXTN_MOE_TESTS (the gtest filter; "none" skips the tests), NEXTN_MOE_NCU=1
# (Nsight Compute kernel durations of a few decode steps, clocks left alone,
# summed per kernel name: logs/ncu_<preset>.txt).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_BENCH_BUDGET:-540}
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
START=$(date +%s)
record_start
link_source_root
export_cuda_libs
N=$BUILD/nextn
mkdir -p "$CK"

# The MoE suites, and the dense model suites the shared layer path runs through.
TESTS=${NEXTN_MOE_TESTS:-CudaMoeKernels.*:Fixtures/CudaMoe.*:Formats/CudaMoeSynthetic.*:*CudaModel.TeacherForced*:*CudaModel.Greedy*:*CudaModel.Graphs*:CudaModelStreamed.*:*CudaBatch.ForwardsTogetherEqualEachAlone*:CudaOps.*}
if [ "$TESTS" != none ]; then
  run_step tests 300 "$BUILD/nextn_tests" --gtest_filter="$TESTS"
  grep -E "^\[  PASSED  \] [0-9]|^\[  FAILED  \] |^\[cuda|Failure|Expected|Which is|error:" "$LOG/tests.txt" | head -60 >>"$SUMMARY"
fi

# Gemma 4 26B-A4B q4 with its assistant (preset "gemma4-26b-a4b"): greedy
# decode (bench decode), then generate --json: greedy, the oracle at
# acceptance 0.9 / 0.8 / 0.7 without a draft cost, and the real (random)
# assistant, which runs on the CPU reading the GPU target's K/V: its rounds
# are what an assistant draft costs today.
gemma_preset() {
  local preset=$1 dir=$CK/$1-q4
  run_step "make_$preset" 240 "$N" make-checkpoint --preset "$preset" --quant q4 --seed 0 --out "$dir/target"
  run_step "make_${preset}_assistant" 60 "$N" make-checkpoint --preset "$preset-assistant" --quant q4 --seed 0 \
    --out "$dir/assistant"
  run_step "decode_$preset" 150 "$N" bench decode --backend cuda -m "$dir/target" --prompt-len 16 -n 128 --repeats 3 \
    --json
  local gen=(generate --backend cuda -m "$dir/target" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -n 256
    --ignore-eos --json)
  run_step "greedy_$preset" 90 "$N" "${gen[@]}"
  for K in 3 4; do
    run_step "oracle${K}_$preset" 90 "$N" "${gen[@]}" --draft oracle --accept-rates 0.9,0.8,0.7 --block-size $K
    run_step "assistant${K}_$preset" 150 "$N" "${gen[@]}" --draft "$dir/assistant" --block-size $K
  done
  rm -rf "$dir"
}

# A Qwen3.5 preset generated in host memory by bench decode --preset (no
# file: the 122B-A10B q4 is 65 GiB, the disk's size): greedy decode against
# its roofline, then MTP rounds at K = 3 (each bench generates it again).
memory_preset() {
  local preset=$1
  local common=(bench decode --backend cuda --preset "qwen3.5-$preset" --quant q4 --seed 0 --prompt-len 16 -n 64)
  run_step "decode_$preset" 240 "$N" "${common[@]}" --repeats 2 --json
  run_step "mtp3_$preset" 200 "$N" "${common[@]}" --repeats 1 --draft mtp --block-size 3 --json
}

# The verify arms at the MoE shape (NEXTN_MOE_VERIFY=1): bench verify with
# the oracle at acceptance 0.8 at the MTP head's cost, K = 2, 3, 4, 8, every arm.
verify_rows() {
  local preset=$1 dir=$2
  run_step "verify_$preset" 240 "$N" bench verify --backend cuda -m "$dir" --draft oracle --accept-rate 0.8 \
    --draft-cost mtp --block-sizes 2,3,4,8 --verify batched,walk,pad,fused --repeats 3 -n 64 --json
}

for preset in ${NEXTN_MOE_PRESETS:-35b-a3b}; do
  case $preset in gemma4-*) gemma_preset "$preset"; continue ;; esac
  dir=$CK/$preset-q4
  run_step "make_$preset" 240 "$N" make-checkpoint --preset "qwen3.5-$preset" --quant q4 --seed 0 --out "$dir"
  if [ "${NEXTN_MOE_VERIFY:-0}" = 1 ]; then verify_rows "$preset" "$dir"; fi
  if [ "${NEXTN_MOE_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
    # Past the load's packing kernels and the prompt's forward: about two decode steps' kernels.
    run_step "ncu_raw_$preset" 180 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      --launch-skip 4000 --launch-count 1200 "$N" generate --backend cuda -m "$dir" \
      --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -n 24 --ignore-eos
    python3 scripts/device/ncu_sum.py "$LOG/ncu_raw_$preset.txt" >"$LOG/ncu_$preset.txt" 2>&1
    rm -f "$LOG/ncu_raw_$preset.txt"
    head -30 "$LOG/ncu_$preset.txt" >>"$SUMMARY"
  fi
  common=(bench decode --backend cuda -m "$dir" --prompt-len 16 -n 128 --repeats 3)
  run_step "decode_$preset" 120 "$N" "${common[@]}" --breakdown --json
  if [ "${NEXTN_MOE_QUICK:-0}" = 1 ]; then rm -rf "$dir"; continue; fi
  for K in 2 3 4; do
    run_step "mtp${K}_$preset" 90 "$N" "${common[@]}" --draft mtp --block-size $K --breakdown --json
  done
  gen=(generate --backend cuda -m "$dir" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -n 256 --ignore-eos --json)
  run_step "greedy_$preset" 60 "$N" "${gen[@]}"
  for K in 3 4; do
    run_step "oracle${K}_$preset" 60 "$N" "${gen[@]}" --draft oracle --accept-rates 0.9,0.8,0.7 --draft-cost mtp --block-size $K
  done
  rm -rf "$dir"
done

for preset in ${NEXTN_MOE_MEMORY_PRESETS:-}; do memory_preset "$preset"; done

say "elapsed: $(( $(date +%s) - START )) s"
record_finish
