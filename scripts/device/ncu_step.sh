#!/usr/bin/env bash
# Why a small-model decode step's kernels take longer than their bytes
# (issue 24), one device call: Nsight Compute (clocks left alone) on greedy
# decode of a random q4 checkpoint of NEXTN_NCU_PRESET (qwen3.5-0.8b).
#  1. every kernel's duration over (NEXTN_NCU_STEPS + 2) steps' worth of
#     decode kernels past the first 1000 launches, summed per kernel instance
#     by ncu_sum.py:
#     the kernel-only time of a step, to set beside bench decode's step;
#  2. the full section set (speed of light, warp states, launch, occupancy,
#     memory, source counters) on the first NEXTN_NCU_DETAIL launches of
#     each of the kernels matched by NEXTN_NCU_KERNELS, inside decode steps.
# Writes $OUT/ncu_durations.csv.gz, $OUT/ncu_durations_sum.txt,
# $OUT/ncu_detail.txt.gz and $OUT/summary.txt.
#
#   scripts/device/prepare.sh; device run, carry [build-cuda.tar.xz]:
#     bash scripts/device/ncu_step.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
unpack_carry
mkdir -p "$OUT"
N=$BUILD/nextn
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
PRESET=${NEXTN_NCU_PRESET:-qwen3.5-0.8b}
CK=/tmp/nextn-ncu-ck
say "commit: $(head -1 "$BUILD/COMMIT")  preset: $PRESET  ncu: $NCU"
"$N" make-checkpoint --preset "$PRESET" --quant q4 --seed 0 --out "$CK" >/dev/null || { say "make-checkpoint failed"; exit 1; }
gen=(generate --backend cuda -m "$CK" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 --ignore-eos)

# Kernels per step: bench decode's own count, so the skip lands on decode steps.
per_step=$("$N" bench decode --backend cuda -m "$CK" --prompt-len 16 -n 32 --repeats 1 --breakdown --json 2>/dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print([round(p["kernels"]) for p in d["breakdown"]["parts"] if p["unit"] == "token"][0])' 2>/dev/null)
per_step=${per_step:-140}
say "kernels per step (bench decode): $per_step"

# 1. Durations. The load and the prompt launch fewer kernels than the 1000
#    skipped (packing and one forward), so the window holds decode steps only;
#    ncu_sum.py --per-step scales its total to one step of bench decode's count.
STEPS=${NEXTN_NCU_STEPS:-4}
timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-kernel-base demangled --launch-skip 1000 \
  --launch-count $(( (STEPS + 2) * per_step )) "$N" "${gen[@]}" -n 40 >"$OUT/ncu_durations.csv" 2>"$OUT/ncu_durations.err"
say "durations: ncu exit $?"
python3 scripts/device/ncu_sum.py "$OUT/ncu_durations.csv" --per-step "$per_step" >"$OUT/ncu_durations_sum.txt" 2>&1
head -40 "$OUT/ncu_durations_sum.txt" | tee -a "$SUMMARY"
gzip -f "$OUT/ncu_durations.csv"

# 2. Full sections on a few decode-step launches of the named kernels.
DETAIL=${NEXTN_NCU_DETAIL:-6}
: >"$OUT/ncu_detail.txt"
for k in ${NEXTN_NCU_KERNELS:-stream_kernel gdn_step_kernel}; do
  timeout 200 "$NCU" --clock-control none --set full -k "regex:$k" --launch-skip $(( 4 * per_step )) \
    --launch-count "$DETAIL" "$N" "${gen[@]}" -n 40 >>"$OUT/ncu_detail.txt" 2>&1
  say "detail $k: ncu exit $?"
done
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Dynamic Shared|Grid Size|Waves Per SM|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Stall" \
  "$OUT/ncu_detail.txt" | head -150 >>"$SUMMARY"
gzip -f "$OUT/ncu_detail.txt"
rm -rf "$CK"
