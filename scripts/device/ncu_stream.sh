#!/usr/bin/env bash
# Hardware counters of the streamed kernel (Nsight Compute, clocks left alone)
# on the LM head at W = 1 and W = 32: what saturates (issue, tensor pipe,
# DRAM, shared memory) and why warps stall. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${NEXTN_BUILD:-build-cuda}; OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
STALLS=$(for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected dispatch_stall lg_throttle no_instruction branch_resolving membar sleeping misc; do printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $r; done)
STALLS="$STALLS"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
SECTIONS="--metrics $STALLS --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats"
for W in ${WIDTHS:-1 32}; do
  # launches before the first W-wide one: the invariance check (4) for W > 1, 1 for W = 1
  skip=$([ "$W" = 1 ] && echo 1 || echo 4)
  timeout 200 $NCU --clock-control none -k regex:stream_kernel --launch-skip $skip --launch-count 1 $SECTIONS \
    $B/nextn bench projection --shape ${SHAPE:-248320x5120} --quant q4 --group-size 64 --widths $W --repeats 3 ${ARGMAX:---argmax} \
    >"$OUT/ncu_W$W.txt" 2>&1
  grep -E "stalled|pipe_|inst_executed.sum|bank_conflicts|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Issued Ipc|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Stall|Tensor|Pipe|L2 Hit|Shared|Registers|Achieved Occupancy|Block Limit" "$OUT/ncu_W$W.txt" | head -60
done
# SASS instruction mix of the W = 1 argmax kernel (q4, NF 1)
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
$CUOBJ -sass $B/nextn 2>/dev/null | awk '/Function : .*stream_kernelILi4ELi1ELi1ELi3E/{f=1;next} /Function :/{f=0} f' >"$OUT/sass_q4_nf1_argmax.txt"
echo "SASS q4 NF=1 argmax: $(wc -l <"$OUT/sass_q4_nf1_argmax.txt") lines"
grep -oE '^\s+/\*[0-9a-f]+\*/\s+[A-Z0-9_.]+' "$OUT/sass_q4_nf1_argmax.txt" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25
