#!/usr/bin/env bash
# issue 11, cuda branch, call 2: the reset test, then walk while vs flag, ABBA.
set -u
D=$PWD/.devrun-cuda
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
mkdir -p /work/wt 2>/dev/null; [ -e /work/wt/cuda ] || ln -s "$PWD" /work/wt/cuda
cat $D/COMMIT
T0=$(date +%s)
( $D/nextn make-checkpoint --preset qwen3.5-0.8b --quant q4 -o /tmp/m08 >$OUT/mk.txt 2>&1
  $D/nextn make-checkpoint --preset qwen3.5-4b --quant q4 -o /tmp/m4b >>$OUT/mk.txt 2>&1 ) &
MK=$!
timeout 60 $D/nextn_tests --gtest_filter='*CudaHead.ResetEqualsFresh*' >$OUT/tests.txt 2>&1
echo "tests rc $? in $(( $(date +%s) - T0 )) s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|error:|exception" $OUT/tests.txt | head -20
wait $MK; grep wrote $OUT/mk.txt
b() {  # model walk-variant tag K-list repeats limit
  NEXTN_CUDA_WALK=$2 timeout $6 $D/nextn bench verify --backend cuda -m $1 --draft oracle --accept-rate 0.8 \
    --block-sizes $4 --verify batched,walk --repeats $5 -n 64 >$OUT/bench_$3.txt 2>&1
  echo "== $3 ($2) rc $? at $(( $(date +%s) - T0 )) s"; grep -E "^ +[0-9]+ (batched|walk)" $OUT/bench_$3.txt
}
b /tmp/m08 while 08-A1 3,4,8,16,32 3 40
b /tmp/m08 flag  08-B1 3,4,8,16,32 3 40
b /tmp/m08 flag  08-B2 3,4,8,16,32 3 40
b /tmp/m08 while 08-A2 3,4,8,16,32 3 40
b /tmp/m4b while 4b-A1 4,16 3 50
b /tmp/m4b flag  4b-B1 4,16 3 50
