#!/usr/bin/env bash
# Issue 14's throughput table, one device call: `nextn serve --backend cuda`
# on a random Qwen3.5-27B-shape q4 checkpoint (`nextn make-checkpoint`),
# greedy streams over plain HTTP (scripts/bench_serve.py, standard library only)
# at 1, 4, 16 and 32 concurrent streams, plain and with the MTP head: total
# tokens/s, per-stream tokens/s, time to first token, requests and LM-head
# launches per engine step.
#
#   scripts/device/prepare.sh     # here: builds build-cuda/
#   device run, carry build-cuda.tar.xz: bash scripts/device/serve_table.sh
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_SERVE_PRESET (qwen3.5-27b),
# NEXTN_SERVE_STREAMS (1,4,16,32), NEXTN_SERVE_DRAFTS (none,mtp; also oracle, which
# bench_serve.py runs at --accept-rates 0.9,0.8,0.7 --draft-cost mtp, and :K to fix
# the block size, e.g. oracle:4; without it K is chosen per step; "assistant" for a
# Gemma 4 preset: the preset's assistant, made beside it), NEXTN_SERVE_ORACLE_COST (mtp; free, or
# assistant: the oracle at the Gemma 4 assistant's cost), NEXTN_SERVE_N (64),
# NEXTN_CK_DIR (/tmp/nextn-ck).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
PRESET=${NEXTN_SERVE_PRESET:-qwen3.5-27b}
record_start

dir=$CK/serve-$PRESET-q4
t0=$(date +%s)
[ -d "$dir" ] || "$BUILD/nextn" make-checkpoint --preset "$PRESET" --quant q4 --seed 0 --out "$dir" >"$LOG/make.txt" 2>&1
say "make-checkpoint $PRESET q4 (once per machine): exit $? in $(( $(date +%s) - t0 )) s"
# serve needs a tokenizer: the default model's (8189 ids) turns the streamed
# tokens into text; the prompts go in as ids and the table counts tokens.
cp models/default/tokenizer.json models/default/tokenizer_config.json "$dir/"
drafts=${NEXTN_SERVE_DRAFTS:-none,mtp}
oracle_cost=${NEXTN_SERVE_ORACLE_COST:-mtp}
if [[ ",$drafts," == *",assistant"* || $oracle_cost == assistant ]]; then  # a Gemma 4 target's assistant, random too
  adir=$CK/serve-$PRESET-assistant-q4
  t0=$(date +%s)
  [ -d "$adir" ] || "$BUILD/nextn" make-checkpoint --preset "$PRESET-assistant" --quant q4 --seed 1 --out "$adir" \
    >"$LOG/make_assistant.txt" 2>&1
  say "make-checkpoint $PRESET-assistant q4: exit $? in $(( $(date +%s) - t0 )) s"
  drafts=$(echo "$drafts" | sed "s|assistant|$adir|g")
  [ "$oracle_cost" = assistant ] && oracle_cost=$adir
fi
timeout 480 python3 scripts/bench_serve.py --nextn "$BUILD/nextn" --backend cuda --model "$dir" \
  --prompt-ids "$(seq -s, 11 26)" --streams "${NEXTN_SERVE_STREAMS:-1,4,16,32}" \
  --drafts "$drafts" --oracle-cost "$oracle_cost" -n "${NEXTN_SERVE_N:-64}" --json "$OUT/serve_table.json" \
  2>"$LOG/bench_serve.err" | tee -a "$SUMMARY"
say "bench_serve: exit ${PIPESTATUS[0]}; $(tail -2 "$LOG/bench_serve.err" | tr '\n' ' ' | cut -c1-300)"
record_finish
