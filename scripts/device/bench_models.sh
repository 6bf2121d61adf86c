#!/usr/bin/env bash
# Whole-model GPU benchmarks at the real Qwen3.5 shapes (issue 6), one device
# call: random-weight checkpoints written on the GPU machine's disk by
# `nextn make-checkpoint` (never committed), then bench decode (greedy
# tokens/s, 2048-token prefill, copy bandwidth, roofline, peak memory) per
# preset, and the MTP rounds on the 27B q4 with the oracle drafter.
#
#   scripts/device/prepare.sh     # here: builds build-cuda/
#   device run, carry [build-cuda/nextn, build-cuda/lib, build-cuda/COMMIT]:
#     bash scripts/device/bench_models.sh
#
# Environment: NEXTN_BUILD (default build-cuda); NEXTN_BENCH_BUDGET seconds
# (default 330): steps that would start past it are skipped and say so;
# NEXTN_BENCH_PRESETS (default "0.8b:q4 4b:q4 27b:q4 0.8b:bf16 4b:bf16");
# NEXTN_CK_DIR (default /tmp/nextn-ck); NEXTN_SEED (default 0);
# NEXTN_BENCH_VERIFY=0 skips the 27B verify-arm run.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_BENCH_BUDGET:-330}
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
SEED=${NEXTN_SEED:-0}
mkdir -p "$CK"
START=$(date +%s)
N=$BUILD/nextn

record_start

for item in ${NEXTN_BENCH_PRESETS:-0.8b:q4 4b:q4 27b:q4 0.8b:bf16 4b:bf16}; do
  size=${item%%:*}
  q=${item##*:}
  name=$size-$q
  dir=$CK/$name
  # rough need (s): 27b q4 make + decode + verify; small ones are quick
  need=40
  [ "$size" = 27b ] && need=150
  if [ "$(left)" -lt "$need" ]; then say "skip $name: $(left) s of the budget left (needs ~$need)"; continue; fi
  t0=$(date +%s)
  timeout 200 "$N" make-checkpoint --preset "qwen3.5-$size" --quant "$q" --seed "$SEED" --out "$dir" >"$LOG/make_$name.txt" 2>&1
  say "make $name: exit $? in $(( $(date +%s) - t0 )) s: $(tail -1 "$LOG/make_$name.txt")"
  n=256
  reps=3
  [ "$size" = 27b ] && n=128
  t0=$(date +%s)
  timeout 240 "$N" bench decode --backend cuda -m "$dir" --prompt-len 16 -n $n --repeats $reps --prefill-len 2048 \
    >"$LOG/decode_$name.txt" 2>&1
  say "bench decode $name (prompt 16, -n $n, $reps repeats, prefill 2048): exit $? in $(( $(date +%s) - t0 )) s"
  grep -E "tokens/s|bytes per|bandwidth|roofline|peak device" "$LOG/decode_$name.txt" | tee -a "$SUMMARY"
  if [ "$size" = 27b ] && [ "$q" = q4 ] && [ "${NEXTN_BENCH_VERIFY:-1}" = 1 ]; then
    if [ "$(left)" -lt 60 ]; then
      say "skip verify $name: $(left) s left"
    else
      t0=$(date +%s)
      timeout $(( $(left) > 200 ? 200 : $(left) )) "$N" bench verify --backend cuda -m "$dir" --draft oracle \
        --accept-rate 0.8 --block-sizes 3,4 --verify batched,walk,pad,fused --repeats 3 -n 64 \
        >"$LOG/verify_$name.txt" 2>&1
      say "bench verify $name (oracle 0.8, K 3,4, 4 arms, 3 repeats, -n 64): exit $? in $(( $(date +%s) - t0 )) s"
      cat "$LOG/verify_$name.txt" >>"$SUMMARY"
    fi
  fi
  rm -rf "$dir"
done

say "elapsed: $(( $(date +%s) - START )) s"
record_finish
