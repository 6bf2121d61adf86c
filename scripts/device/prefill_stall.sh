#!/usr/bin/env bash
# Issue 23's chunked-prefill benchmark, one device call: `nextn serve
# --backend cuda` on a random Qwen3.5-27B-shape q4 checkpoint, 16 greedy
# streams, then one 4096-token prompt (scripts/bench_prefill_stall.py): the
# streams' gaps between tokens while it arrives, at several --prefill-chunk
# sizes (4096: the prompt in one piece).
#
#   scripts/device/prepare.sh     # here: builds build-cuda/, packs build-cuda.tar.xz
#   device run, carry build-cuda.tar.xz: bash scripts/device/prefill_stall.sh
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_STALL_PRESET (qwen3.5-27b),
# NEXTN_STALL_CHUNKS (128,512,4096), NEXTN_STALL_STREAMS (16), NEXTN_CK_DIR (/tmp/nextn-ck),
# NEXTN_STALL_SERVE_ARGS (more serve arguments, e.g. --log-steps: the step lines go to logs/).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
PRESET=${NEXTN_STALL_PRESET:-qwen3.5-27b}
record_start

dir=$(serve_checkpoint "$PRESET")
timeout 420 python3 scripts/bench_prefill_stall.py --nextn "$BUILD/nextn" --backend cuda --model "$dir" \
  --streams "${NEXTN_STALL_STREAMS:-16}" --chunks "${NEXTN_STALL_CHUNKS:-128,512,4096}" --long-prompt 4096 \
  --serve-args="${NEXTN_STALL_SERVE_ARGS:-}" --json "$OUT/prefill_stall.json" 2>"$LOG/bench_prefill_stall.err" | tee -a "$SUMMARY"
say "bench_prefill_stall: exit ${PIPESTATUS[0]}; $(tail -2 "$LOG/bench_prefill_stall.err" | tr '\n' ' ' | cut -c1-300)"
record_finish
