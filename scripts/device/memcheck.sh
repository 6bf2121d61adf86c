#!/usr/bin/env bash
# One call on the GPU machine: a bounded part of the CUDA test suite under
# compute-sanitizer's memcheck (out-of-bounds and misaligned device accesses,
# device-memory leaks at exit). Built and carried as for run.sh:
#
#   scripts/device/prepare.sh
#   device run, carry [build-cuda/nextn, build-cuda/nextn_tests, build-cuda/lib, build-cuda/COMMIT]:
#     bash scripts/device/memcheck.sh
#
# Three phases (ops, model, spec), each a gtest filter with its own time
# limit; together they stay under 4 minutes on an H200 (memcheck runs kernels
# tens of times slower, so model and spec take one fixture and the fp32 spec
# sweep, not the whole suite). Tests that make CUDA calls fail on purpose
# (the out-of-memory probe) and the CLI tests (they run other processes) are
# left out. A phase passes when gtest passes and memcheck reports 0 errors.
# Logs: $OUT/logs.tar.gz (memcheck_<phase>.txt each) and $OUT/summary.txt.
#
# Environment: NEXTN_BUILD (default build-cuda); NEXTN_MEMCHECK_{OPS,MODEL,SPEC}
# replace a phase's filter; NEXTN_T_MEMCHECK_{OPS,MODEL,SPEC} its limit (s).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
record_start
link_source_root

SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
if [ ! -x "$SANITIZER" ]; then
  say "FAIL: compute-sanitizer not found (PATH or /usr/local/cuda/bin)"
  status=1
elif [ ! -x "$BUILD/nextn_tests" ]; then
  say "FAIL: $BUILD/nextn_tests missing (carry it; see the header of this script)"
  status=1
else
  say "sanitizer: $("$SANITIZER" --version 2>&1 | tail -1)"
  fx=qwen35_causal_tied
  phases=("ops|${NEXTN_MEMCHECK_OPS:-CudaOps.*:CudaFolds.*:CudaGdn.*:CudaHeadOps.*:CudaHandles.MovesHandOver*:CudaHandles.RuntimeThatFails*}|${NEXTN_T_MEMCHECK_OPS:-90}"
          "model|${NEXTN_MEMCHECK_MODEL:-Fixtures/CudaModel.TeacherForcedArgmaxMatchesReference/$fx:Fixtures/CudaModel.GreedyMatchesReferenceInFp32Mode/$fx:Fixtures/CudaModel.RuntimeContract/$fx:Fixtures/CudaModel.GraphsMatchEagerLaunches/$fx}|${NEXTN_T_MEMCHECK_MODEL:-60}"
          "spec|${NEXTN_MEMCHECK_SPEC:-Fixtures/CudaModel.SpeculativeEqualsGreedyFp32/$fx:Fixtures/CudaHead.EveryArmCountsWhatRan/$fx}|${NEXTN_T_MEMCHECK_SPEC:-80}")
  for ph in "${phases[@]}"; do
    IFS='|' read -r name filter limit <<<"$ph"
    start=$(date +%s)
    timeout "$limit" "$SANITIZER" --tool memcheck --leak-check full --report-api-errors no --error-exitcode 99 \
      "$BUILD/nextn_tests" --gtest_filter="$filter" >"$LOG/memcheck_$name.txt" 2>&1
    rc=$?
    errors=$(grep -E "ERROR SUMMARY: [0-9]+ error" "$LOG/memcheck_$name.txt" | tail -1)
    verdict=PASS
    case $rc in
      0) ;;
      99) verdict="FAIL (memcheck errors)" ;;
      124) verdict="TIMEOUT (limit $limit s; raise NEXTN_T_MEMCHECK_${name^^} or narrow the filter)" ;;
      *) verdict="FAIL (exit $rc)" ;;
    esac
    say "memcheck $name ($filter): $verdict in $(( $(date +%s) - start )) s; ${errors:-no error summary}"
    grep -E "^\[  PASSED  \] [0-9]|^\[  FAILED  \] |tests ran" "$LOG/memcheck_$name.txt" | tail -20 >>"$SUMMARY"
    grep -E "^========= (Invalid|Leaked|Program hit|Address|Saved host backtrace)" "$LOG/memcheck_$name.txt" | head -20 >>"$SUMMARY"
    [ "$verdict" != PASS ] && status=1
  done
fi

say "status: $([ $status = 0 ] && echo PASS || echo FAIL)"
record_finish
cat "$SUMMARY"
exit $status
