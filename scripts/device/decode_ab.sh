#!/usr/bin/env bash
# A/B of whole-model decode between two binaries in one device call: per
# shape, `nextn bench decode --json` with the base binary and the new one in
# the order base, new, base, new (the same machine state for both), then
# scripts/decode_ab.py's table and JSON (decode-h200-<date>.md's method).
#
# The tracked tree (about 55 MiB) and two binaries do not fit one call's
# 64 MiB. Either the paths no device call reads stay behind
# (scripts/device/carry_trim.sh, about 47 MiB then) and both binaries travel
# in one call, or they travel in two calls on one warm machine:
#
#   here:   git stash / checkout the base; scripts/device/prepare.sh;
#           bash scripts/device/pack_base.sh          # build-base.tar.xz: its nextn alone
#           back to the change; scripts/device/prepare.sh
#   one call: bash scripts/device/carry_trim.sh on; carry both archives:
#           bash scripts/device/run.sh; bash scripts/device/decode_ab.sh   (then carry_trim.sh off here)
#   or call 1, carry build-cuda.tar.xz: bash scripts/device/run.sh (or any test run; it unpacks build-cuda/)
#   call 2 within the machine's idle release (30 s), carry build-base.tar.xz:
#           bash scripts/device/decode_ab.sh          # build-cuda/ is still there
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_AB_SIZES ("27b 0.8b 4b"),
# NEXTN_AB_QUANT (q4), NEXTN_AB_TOKENS (128), NEXTN_AB_BLOCKS ("1": block
# sizes; K > 1 runs --draft mtp --block-size K and compares ms per round),
# NEXTN_AB_BUDGET (480 s: no run starts with fewer than 20 s of it left;
# lib.sh's step_limit).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_AB_BUDGET:-480}
START=$(date +%s)
record_start
mkdir -p base "$OUT/ab"
[ -f build-base.tar.xz ] && tar xJf build-base.tar.xz -C base
if [ ! -x "$BUILD/nextn" ] || [ ! -x "base/$BUILD/nextn" ]; then
  say "FAIL: $BUILD/nextn (a warm machine's, or carried) or base/$BUILD/nextn (build-base.tar.xz) missing"
  record_finish
  exit 1
fi
base_commit=$(head -1 "base/$BUILD/COMMIT")
new_commit=$(head -1 "$BUILD/COMMIT")
say "base $base_commit, new $new_commit"
for size in ${NEXTN_AB_SIZES:-27b 0.8b 4b}; do
  for k in ${NEXTN_AB_BLOCKS:-1}; do
    draft=()
    [ "$k" -gt 1 ] && draft=(--draft mtp --block-size "$k")
    for side in base new base new; do
      limit=$(step_limit "decode $size K=$k $side" 120) || continue
      bin=$BUILD/nextn
      [ $side = base ] && bin=base/$BUILD/nextn
      f=$OUT/ab/decode_${size}_k${k}_${side}_$(date +%s%N).json
      timeout "$limit" "$bin" bench decode --backend cuda --preset "qwen3.5-$size" --quant "${NEXTN_AB_QUANT:-q4}" \
        --prompt-len 16 -n "${NEXTN_AB_TOKENS:-128}" --repeats 3 "${draft[@]}" --json >"$f" \
        2>>"$LOG/decode_${size}_k${k}_${side}.err"
      say "decode $size K=$k $side: exit $?"
    done
  done
done
python3 scripts/decode_ab.py --a "$OUT/ab/decode_*_base_*.json" --b "$OUT/ab/decode_*_new_*.json" \
  --commit-a "$base_commit" --commit-b "$new_commit" --json "$OUT/ab/decode-ab.json" | tee -a "$SUMMARY"
# one archive: a call brings back a limited number of files
tar czf "$OUT/decode-ab.tar.gz" -C "$OUT" ab && rm -rf "$OUT/ab"
record_finish
