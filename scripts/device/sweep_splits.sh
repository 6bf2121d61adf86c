#!/usr/bin/env bash
# Split-K and occupancy sweep of the streamed kernel on the 27B trunk shapes
# (issue 24): `nextn bench projection --splits S` at 1, 8, 16 and 32 rows,
# then the blocks-per-SM and ring-depth caps at the production split. The
# split count changes the bits (summation order), so the production choice
# stays a function of the shape alone (stream_splits); this measures which
# function. Output: $OUT/sweep_splits.txt.
#
#   scripts/device/prepare.sh; device run, carry build-cuda.tar.xz: bash scripts/device/sweep_splits.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
record_start
W=${WIDTHS:-1,8,16,32}
row() { grep -E "^ +[0-9]+ " | awk '{printf "R=%s %s ms %s%%  ", $1, $2, $6} END {print ""}'; }
{
for shape in ${SHAPES:-34816x5120 5120x17408 16480x5120 14336x5120 5120x6144}; do
  for s in ${SPLITS:-0 1 2 3 4 6 8}; do
    printf '%s splits=%s: ' "$shape" "$s"
    timeout 60 "$BUILD/nextn" bench projection --shape "$shape" --splits "$s" --widths "$W" --repeats 20 2>&1 | row
  done
done
for shape in ${CAP_SHAPES:-34816x5120 5120x17408}; do
  for cfg in ${CFGS:-1:8 1:12 1:20 2:12 3:12}; do
    set -- ${cfg//:/ }
    printf '%s per_sm<=%s stages<=%s: ' "$shape" "$1" "$2"
    timeout 60 "$BUILD/nextn" bench projection --shape "$shape" --stream-per-sm "$1" --stream-stages "$2" \
      --widths "$W" --repeats 20 2>&1 | row
  done
done
} | tee "$OUT/sweep_splits.txt"
record_finish
