#!/usr/bin/env bash
# Issue 5's device call: matmul correctness tests, then `nextn bench projection`
# (LM head q4 g64 with and without argmax, q8 g64 and q4/q8 g128 with argmax, the 27B trunk shapes) and the
# PyTorch anchors, with nvidia-smi state before and after. Logs under $OUT.
# Build here first with scripts/device/prepare.sh and carry build-cuda/{nextn,nextn_tests,lib,COMMIT}.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}; B=${NEXTN_BUILD:-build-cuda}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
Q='--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,utilization.gpu,power.draw,memory.used'
{ echo "commit: $(cat $B/COMMIT 2>/dev/null | tr '\n' ' ')"; date -u; uptime; nvidia-smi $Q --format=csv; } >"$OUT/before.txt" 2>&1
cat "$OUT/before.txt"
timeout ${T_TESTS:-150} $B/nextn_tests --gtest_filter='CudaOps.Matmul*:CudaOps.Streamed*:CudaOps.FusedArgmax*:CudaOps.Embedding*' 2>&1 | tail -${TAIL_TESTS:-25} | tee "$OUT/tests.txt"
N=$B/nextn
{
for W in "--argmax" ""; do
  timeout 120 $N bench projection --shape 248320x5120 --quant q4 --group-size 64 --widths 1,2,3,4,5,6,8,12,16,24,32 $W 2>&1
done
for qg in "q8 64" "q4 128" "q8 128"; do
  set -- $qg
  timeout 60 $N bench projection --shape 248320x5120 --quant $1 --group-size $2 --widths 1,4,8,16,32 --argmax 2>&1
done
for s in 10240x5120 6144x5120 5120x6144 17408x5120 5120x17408; do
  timeout 60 $N bench projection --shape $s --quant q4 --group-size 64 --widths 1,4,8,32 2>&1
done
} | tee "$OUT/bench.txt"
timeout ${T_ANCH:-150} python3 scripts/device/projection_anchors.py 2>&1 | tail -3 | tee "$OUT/anchors.json"
{ date -u; nvidia-smi $Q --format=csv; } >"$OUT/after.txt" 2>&1
cat "$OUT/after.txt"
