#!/usr/bin/env bash
# Where a decode step's time goes (issue 12), one device call: Nsight Compute
# kernel durations (gpu__time_duration, clocks left alone) for the kernels of
# greedy decode steps on a random 0.8B-shape q4 checkpoint, then
# `bench decode --breakdown` (greedy with a 2048-token prefill, and MTP K=4)
# on the 0.8B and 27B shapes. Writes $OUT/*.txt.
#
#   scripts/device/prepare.sh; device run, carry [build-cuda/...]:
#     bash scripts/device/profile_step.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
BUILD=${NEXTN_BUILD:-build-cuda}
export LD_LIBRARY_PATH="$PWD/$BUILD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
N=$BUILD/nextn
head -1 "$BUILD/COMMIT" >"$OUT/commit.txt"
for s in ${NEXTN_PROFILE_SIZES:-0.8b 27b}; do
  ck=/tmp/nextn-ck-$s
  "$N" make-checkpoint --preset "qwen3.5-$s" --quant q4 --seed 0 --out "$ck" >/dev/null
  if [ "$s" = 0.8b ] && command -v ncu >/dev/null; then
    # prompt 16 (one forward) + 24 tokens; skip the load-time packing and the
    # prompt's kernels, keep those of 8 decode steps
    timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 1200 --launch-count 900 \
      "$N" generate --backend cuda -m "$ck" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -n 24 --ignore-eos \
      >"$OUT/ncu_$s.csv" 2>"$OUT/ncu_$s.err"
    echo "ncu exit $?" >>"$OUT/ncu_$s.err"
  fi
  timeout 200 "$N" bench decode --backend cuda -m "$ck" --prompt-len 16 -n 64 --repeats 2 --prefill-len 2048 \
    --breakdown >"$OUT/breakdown_$s.txt" 2>&1
  timeout 200 "$N" bench decode --backend cuda -m "$ck" --prompt-len 16 -n 64 --repeats 2 --draft mtp --block-size 4 \
    --breakdown >"$OUT/breakdown_mtp4_$s.txt" 2>&1
  rm -rf "$ck"
done
