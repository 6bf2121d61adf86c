#!/usr/bin/env bash
# Issue 12, one device call: does the verify forward (the target forward of
# K + 1 rows in an MTP round) lose with PDL at every Qwen3.5 shape? MTP rounds
# at K = 4 and 8 on random q4 checkpoints, with PDL everywhere (--pdl on),
# with the multi-row forward graphs captured without PDL
# (bench decode --pdl multi-row-off) and with no PDL at all (--pdl off), in
# ABA order (PDL everywhere first and last) so drift shows.
#
#   scripts/device/prepare.sh     # here: builds build-cuda/
#   device run, carry the build: bash scripts/device/pdl_split.sh
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_RECORD_SIZES ("0.8b 4b 27b"),
# NEXTN_BENCH_BUDGET seconds (400), NEXTN_CK_DIR (/tmp/nextn-ck).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_BENCH_BUDGET:-400}
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
START=$(date +%s)
N=$BUILD/nextn
mkdir -p "$CK"
record_start


for size in ${NEXTN_RECORD_SIZES:-0.8b 4b 27b}; do
  dir=$CK/$size-q4
  n=256
  [ "$size" = 27b ] && n=128
  run_step "make_$size" 120 "$N" make-checkpoint --preset "qwen3.5-$size" --quant q4 --seed 0 --out "$dir"
  common=(bench decode --backend cuda -m "$dir" --prompt-len 16 -n "$n" --repeats 3 --draft mtp)
  for k in 4 8; do
    run_step "k${k}_${size}_pdl_a" 120 "$N" "${common[@]}" --block-size $k --pdl on
    run_step "k${k}_${size}_fwd_multi_off" 120 "$N" "${common[@]}" --block-size $k --pdl multi-row-off
    run_step "k${k}_${size}_no_pdl" 120 "$N" "${common[@]}" --block-size $k --pdl off
    run_step "k${k}_${size}_pdl_b" 120 "$N" "${common[@]}" --block-size $k --pdl on
  done
  rm -rf "$dir"
done

say "elapsed: $(( $(date +%s) - START )) s"
record_finish
