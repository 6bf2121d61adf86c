#!/usr/bin/env bash
# issue 11, cuda branch: head counter tests, both walks, and a quick verify timing.
set -u
D=$PWD/.devrun-cuda
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
mkdir -p /work/wt 2>/dev/null; [ -e /work/wt/cuda ] || ln -s "$PWD" /work/wt/cuda
cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
T0=$(date +%s)
( $D/nextn make-checkpoint --preset qwen3.5-0.8b --quant q4 -o /tmp/m08 >$OUT/mk.txt 2>&1; echo "make-checkpoint rc $? at $(( $(date +%s) - T0 )) s" >>$OUT/mk.txt ) &
MK=$!
timeout 150 $D/nextn_tests --gtest_filter='CudaHeadOps.*:*CudaHead.*:CudaOps.FusedArgmaxAndWalk:*CudaModel.GraphsMatchEagerLaunches*' >$OUT/tests.txt 2>&1
echo "tests rc $? in $(( $(date +%s) - T0 )) s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[cuda head|Failure|Expected|Which is|error:" $OUT/tests.txt | head -40
wait $MK; cat $OUT/mk.txt | tail -2
for w in while flag; do
  NEXTN_CUDA_WALK=$w timeout 50 $D/nextn bench verify --backend cuda -m /tmp/m08 --draft oracle --accept-rate 0.8 \
    --block-sizes 4,16 --verify batched,walk,fused --repeats 3 -n 64 >$OUT/bench_$w.txt 2>&1
  echo "bench $w rc $? at $(( $(date +%s) - T0 )) s"; grep -vE "^\s*$" $OUT/bench_$w.txt | tail -14
done
