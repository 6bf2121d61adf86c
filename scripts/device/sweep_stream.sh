#!/usr/bin/env bash
# Tuning sweep of the streamed kernel's speed knobs (blocks per SM, ring
# depth; the bits do not depend on them) on the LM head and one trunk shape.
# Build with scripts/device/prepare.sh and carry build-cuda/{nextn,nextn_tests,lib,COMMIT}.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${NEXTN_BUILD:-build-cuda}
export LD_LIBRARY_PATH="$PWD/$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
echo "commit: $(head -1 $B/COMMIT)"
timeout 120 $B/nextn_tests --gtest_filter="${FILTER:-CudaOps.Matmul*:CudaOps.Streamed*:CudaOps.FusedArgmax*}" 2>&1 | grep -E "OK|FAIL|PASSED" 
row() { grep -E "^ +[0-9]+ " | awk '{printf "W=%s %s ms %s%%  ", $1, $2, $6} END {print ""}'; }
for cfg in ${CFGS:-3:12 2:12 1:12 2:6}; do
  set -- ${cfg//:/ }
  echo "per_sm<=$1 stages<=$2"
  for shape0 in ${SHAPES:-248320x5120_--argmax 10240x5120 5120x17408}; do
    shape=${shape0//_/ }
    timeout 60 $B/nextn bench projection --stream-per-sm $1 --stream-stages $2 --shape $shape --quant q4 \
      --group-size 64 --widths ${WIDTHS:-1,4,8,16,32} 2>&1 | { read -r h; echo "  $h" | cut -c1-110; row; }
  done
done
