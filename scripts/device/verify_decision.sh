#!/usr/bin/env bash
# Issue 11's decision call on the GPU machine, in one call: the CUDA test
# suite (run.sh: ops, model parity, speculative == greedy, head counters, CLI
# arms) and then the verify-arm sweep (sweep_verify.sh: guard, 4B, 27B).
# Each half's files are packed into one tarball so they come back whole.
#
#   scripts/device/prepare.sh      # here: builds build-cuda/
#   device run, carry [build-cuda/nextn, build-cuda/nextn_tests, build-cuda/lib, build-cuda/COMMIT]:
#     bash scripts/device/verify_decision.sh                          # call 1
#     NEXTN_SWEEP_MODE=27b NEXTN_SKIP_SUITE=1 bash scripts/device/verify_decision.sh   # call 2 (27B spread)
#   here: tar xzf sweep.tar.gz per call, then scripts/device/sweep_tables.py DIR1/sweep DIR2/sweep
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-$PWD/out}
mkdir -p "$O"
status=0
if [ "${NEXTN_SKIP_SUITE:-0}" != 1 ]; then
  mkdir -p "$O/suite"
  OUT=$O/suite NEXTN_T_OPS=${NEXTN_T_OPS:-60} NEXTN_T_MODEL=${NEXTN_T_MODEL:-60} NEXTN_T_SPEC=${NEXTN_T_SPEC:-150} \
    bash scripts/device/run.sh || status=1
  cp "$O/suite/summary.txt" "$O/suite_summary.txt" 2>/dev/null
  tar czf "$O/suite.tar.gz" -C "$O" suite && rm -rf "$O/suite"
fi
mkdir -p "$O/sweep"
OUT=$O/sweep NEXTN_SWEEP_BUDGET=${NEXTN_SWEEP_BUDGET:-400} bash scripts/device/sweep_verify.sh || status=1
cp "$O/sweep/summary.txt" "$O/sweep_summary.txt" 2>/dev/null
tar czf "$O/sweep.tar.gz" -C "$O" sweep && rm -rf "$O/sweep"
exit $status
