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

# arm SIZE NAME ARGS...: one bench decode --json; the summary gets its
# decode tokens/s and ms per round.
arm() {
  local size=$1 name=$2 limit
  shift 2
  limit=$(step_limit "$size/$name" 90) || return 0
  mkdir -p "$OUT/json/$size"
  local f=$OUT/json/$size/$name.json t0=$(date +%s)
  timeout "$limit" "$N" bench decode --backend cuda -m "$CK/$size-q4" --prompt-len 16 "$@" --repeats 3 --json \
    >"$f" 2>"$LOG/$size-$name.txt"
  say "$size $name: exit $? in $(( $(date +%s) - t0 )) s: $*"
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
print("    decode tok/s", j["decode_tokens_per_second"], "ms per round", j.get("decode_ms_per_round"))' "$f" \
    >>"$SUMMARY" 2>&1
}

for size in ${NEXTN_RECORD_SIZES:-0.8b 4b 27b}; do
  n=256
  [ "$size" = 27b ] && n=128
  if [ ! -d "$CK/$size-q4" ]; then
    timeout 120 "$N" make-checkpoint --preset "qwen3.5-$size" --quant q4 --seed 0 --out "$CK/$size-q4" \
      >"$LOG/make-$size.txt" 2>&1 || { say "make $size: failed"; continue; }
  fi
  arm "$size" step_default -n "$n"
  arm "$size" step_on -n "$n" --pdl on
  arm "$size" round4_default -n "$n" --draft mtp --block-size 4
  arm "$size" round4_on -n "$n" --draft mtp --block-size 4 --pdl on
done
say "elapsed: $(( $(date +%s) - START )) s"
record_finish
