#!/usr/bin/env bash
# PDL on or off (docs/benchmark_results/decode-h200-2026-12-05c.md), one
# device call: for the 0.8B, 4B and 27B q4 shapes, `nextn bench decode` at
# one row with the default PDL policy (off since that record) and with
# --pdl on, then the K = 4 MTP round the same two ways; no --breakdown
# anywhere, so both arms are timed alike (the 12-05c record's PDL arm also
# ran the breakdown). If off still wins, PDL goes from the runtime. Each --json
# output goes to $OUT/json/<size>/ (at most 8 files a folder come back),
# the medians to the summary.
#
#   scripts/device/prepare.sh     # here: builds build-cuda/
#   device run, carry [build-cuda.tar.xz]:  bash scripts/device/pdl_decide.sh
#
# Environment: NEXTN_BENCH_BUDGET seconds (300), NEXTN_RECORD_SIZES
# ("0.8b 4b 27b"), NEXTN_CK_DIR (/tmp/nextn-ck).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_BENCH_BUDGET:-300}
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
START=$(date +%s)
export_cuda_libs
N=$BUILD/nextn
record_start

mkdir -p "$CK"
for size in ${NEXTN_RECORD_SIZES:-0.8b 4b 27b}; do
  dir=$CK/$size-q4
  n=256
  [ "$size" = 27b ] && n=128
  [ -d "$dir" ] || run_step "make_$size" 120 "$N" make-checkpoint --preset "qwen3.5-$size" --quant q4 --seed 0 --out "$dir"
  common=(bench decode --backend cuda -m "$dir" --prompt-len 16 -n "$n" --repeats 3)
  json_step "$size/step_default" 90 "$N" "${common[@]}"
  json_step "$size/step_on" 90 "$N" "${common[@]}" --pdl on
  json_step "$size/round4_default" 90 "$N" "${common[@]}" --draft mtp --block-size 4
  json_step "$size/round4_on" 90 "$N" "${common[@]}" --draft mtp --block-size 4 --pdl on
done
say "elapsed: $(( $(date +%s) - START )) s"
record_finish
