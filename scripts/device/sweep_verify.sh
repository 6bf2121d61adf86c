#!/usr/bin/env bash
# Issue 11's verify-arm sweep, one device call of at most ~9 minutes:
#   the guard (bench verify --fault runtime-walk-as-batched must exit
#   2 with no table), then per model (4B first, then 27B; real-shape q4,
#   random weights from `nextn make-checkpoint`): `nextn bench verify` over
#   K x arms for each oracle acceptance x draft cost, >= 5 repeats, ABBA
#   (bench verify's own order), JSON per run under $OUT/json; on CUDA also
#   `nextn bench projection` at the model's LM-head shape (the early-exit
#   ceiling per K: projection time of accepted+1 rows vs K rows).
#
#   scripts/device/prepare.sh                 # here: builds build-cuda/
#   device run, carry [build-cuda/nextn, build-cuda/lib, build-cuda/COMMIT]:
#     bash scripts/device/sweep_verify.sh                          # call 1: guard, 4B, 27B
#     NEXTN_SWEEP_MODE=27b bash scripts/device/sweep_verify.sh     # call 2: 27B again (spread between calls)
#   then here: python3 scripts/device/sweep_tables.py OUT1 [OUT2] > tables.md
#
# Environment (defaults in brackets):
#   NEXTN_SWEEP_MODE       all | 27b [all]: 27b skips the 4B and the guard
#   NEXTN_SWEEP_BACKEND    [cuda]; cpu runs the same flow on the CPU backend
#   NEXTN_SWEEP_MODELS     space-separated name=preset or name=@DIR (an existing
#                          checkpoint, e.g. a test fixture for the CPU flow test)
#                          [4b=qwen3.5-4b 27b=qwen3.5-27b]; mode 27b keeps the 27b one.
#                          Gemma 4: gemma4-31b=gemma4-31b (q4 like every preset here,
#                          ~17 GB on disk) with NEXTN_SWEEP_GUARD=0 NEXTN_SWEEP_COSTS=free
#   NEXTN_SWEEP_K [3,4,8,16,32]  NEXTN_SWEEP_ARMS [batched,walk,pad,fused]
#   NEXTN_SWEEP_RATES ["0.8 0.6 0.9"]  NEXTN_SWEEP_COSTS ["free mtp"]
#   NEXTN_SWEEP_REPEATS [5]  NEXTN_SWEEP_N [48] tokens per run
#   NEXTN_SWEEP_WHILE_RATES ["0.8" on cuda, "" on cpu]: also run batched,walk with the
#                          WHILE-graph walk (--walk while) at these rates,
#                          both costs (the default walk is the flag-return walk)
#   NEXTN_SWEEP_BUDGET [520] s for the whole call; NEXTN_SWEEP_RESERVE [300] s
#                          kept for the last model while earlier ones run
#   NEXTN_SWEEP_GUARD [1]: 0 skips the guard (a runtime without the planted
#                          fault, e.g. Gemma 4's, cannot show it)
#   NEXTN_BUILD [build-cuda]  NEXTN_CK_DIR [/tmp/nextn-ck]  NEXTN_SEED [0]
# Every skip (budget) is written to summary.txt; nothing is silently dropped.
#
# Time estimate (from docs/benchmark_results/cuda-backend-h200-2026-11-29.md:
# a 27B q4 verify round costs ~13.3 ms at K = 3/4, greedy 77 tok/s; make 27B
# 15 s, 4B 3 s; a 27B load ~4 s): one bench verify = 1 greedy reference +
# 20 (K, arm) x (1 attribution + 5 timed) runs of -n 48 at ~0.2 s (K = 3:
# ~20 rounds, K = 32: ~10 rounds of a costlier forward) = ~29 s free; the MTP
# chain adds K-2 steps of ~0.7 ms per round (~+10 s). 27B: 3 rates x (29 + 39)
# + make + projection = ~225 s; 4B about a third (~75 s); guard ~6 s: ~310 s
# of the 520 s budget, so the K = 32 forward may cost twice the guess and
# still fit; the while-walk runs (batched,walk at 0.8, both costs) add ~35 s
# (27B) and ~12 s (4B): ~360 s; past the budget the remaining runs are
# skipped and listed.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BACKEND=${NEXTN_SWEEP_BACKEND:-cuda}
MODE=${NEXTN_SWEEP_MODE:-all}
BUDGET=${NEXTN_SWEEP_BUDGET:-520}
RESERVE=${NEXTN_SWEEP_RESERVE:-300}
KS=${NEXTN_SWEEP_K:-3,4,8,16,32}
ARMS=${NEXTN_SWEEP_ARMS:-batched,walk,pad,fused}
RATES=${NEXTN_SWEEP_RATES:-0.8 0.6 0.9}
COSTS=${NEXTN_SWEEP_COSTS:-free mtp}
REPEATS=${NEXTN_SWEEP_REPEATS:-5}
N=${NEXTN_SWEEP_N:-48}
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
SEED=${NEXTN_SEED:-0}
MODELS=${NEXTN_SWEEP_MODELS:-4b=qwen3.5-4b 27b=qwen3.5-27b}
# while-walk runs by default on cuda only (the CPU has one walk; an explicit
# NEXTN_SWEEP_WHILE_RATES there only exercises this script's flow)
if [ "$BACKEND" = cuda ]; then WHILE_RATES=${NEXTN_SWEEP_WHILE_RATES-0.8}; else WHILE_RATES=${NEXTN_SWEEP_WHILE_RATES-}; fi
START=$(date +%s)
export LD_LIBRARY_PATH="$ROOT/$BUILD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"  # libfmt carried by prepare.sh
NEXTN=$BUILD/nextn
mkdir -p "$OUT/json" "$CK"

if [ "$MODE" = 27b ]; then
  kept=""
  for m in $MODELS; do [ "${m%%=*}" = 27b ] && kept="$kept $m"; done
  MODELS=${kept# }
  [ -n "$MODELS" ] || { echo "NEXTN_SWEEP_MODE=27b: no model named 27b in NEXTN_SWEEP_MODELS" >&2; exit 1; }
fi
if [ "$BACKEND" = cuda ]; then
  record_start
else  # no GPU: the same record without nvidia-smi
  mkdir -p "$LOG"; : >"$SUMMARY"
  say "commit: $(head -1 "$BUILD/COMMIT" 2>/dev/null || echo "no $BUILD/COMMIT; the JSON machine records carry the stamped commit")"
  say "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  say "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
say "sweep: mode $MODE, backend $BACKEND, models [$MODELS], K $KS, arms $ARMS, rates [$RATES], costs [$COSTS], $REPEATS repeats, -n $N, budget $BUDGET s"
{ echo "{\"mode\": \"$MODE\", \"backend\": \"$BACKEND\", \"k\": \"$KS\", \"arms\": \"$ARMS\", \"rates\": \"$RATES\","
  echo " \"costs\": \"$COSTS\", \"repeats\": $REPEATS, \"n\": $N, \"budget_s\": $BUDGET}"; } >"$OUT/json/sweep.json"

# model dir for name=preset (made here) or name=@DIR
model_dir() {
  local spec=$1 name=${1%%=*} src=${1#*=}
  if [ "${src#@}" != "$src" ]; then echo "${src#@}"; else echo "$CK/$name-q4"; fi
}

make_model() {
  local spec=$1 name=${1%%=*} src=${1#*=} dir
  dir=$(model_dir "$spec")
  [ "${src#@}" != "$src" ] && { say "model $name: $dir (given)"; return 0; }
  local t0=$(date +%s)
  timeout 200 "$NEXTN" make-checkpoint --preset "$src" --quant q4 --seed "$SEED" --out "$dir" >"$LOG/make_$name.txt" 2>&1
  local rc=$?
  say "make $name ($src q4 seed $SEED): exit $rc in $(( $(date +%s) - t0 )) s: $(tail -1 "$LOG/make_$name.txt")"
  return $rc
}

# The guard: the runtime's walk silently runs the batched projection; bench
# verify must print the counters, no table, and exit 2.
fault_check() {
  local dir=$1 out=$LOG/fault_runtime_walk.txt t0=$(date +%s)
  timeout 120 "$NEXTN" bench verify --backend "$BACKEND" -m "$dir" --fault runtime-walk-as-batched \
    --draft oracle --accept-rate 0.8 --block-sizes 4 --verify batched,walk --repeats 1 -n 16 >"$out" 2>&1
  local rc=$?
  local table=no
  grep -q "^timing:" "$out" && table=yes
  local verdict=FAIL
  [ $rc = 2 ] && [ $table = no ] && grep -q "refused:" "$out" && verdict=PASS
  say "guard --fault runtime-walk-as-batched ($BACKEND, $(basename "$dir")): exit $rc, table printed: $table -> $verdict ($(( $(date +%s) - t0 )) s)"
  sed -n '/^refused:/,/^machine:/p' "$out" | head -8 | tee -a "$SUMMARY"
  echo "{\"fault\": \"runtime-walk-as-batched\", \"backend\": \"$BACKEND\", \"exit\": $rc, \"table\": \"$table\", \"verdict\": \"$verdict\"}" \
    >"$OUT/json/guard.json"
}

# The LM-head projection per width (the ceiling per K): CUDA only.
projection() {
  local name=$1 dir=$2
  [ "$BACKEND" = cuda ] || { say "projection $name: skipped (bench projection is CUDA only)"; return 0; }
  local vocab hidden shape  # the first occurrences (text_config's, when nested)
  vocab=$(grep -o '"vocab_size": *[0-9]*' "$dir/config.json" | head -1 | grep -o '[0-9]*$')
  hidden=$(grep -o '"hidden_size": *[0-9]*' "$dir/config.json" | head -1 | grep -o '[0-9]*$')
  shape=${vocab}x${hidden}
  local t0=$(date +%s)
  timeout 60 "$NEXTN" bench projection --shape "$shape" --quant q4 --widths 1,2,3,4,5,6,7,8,9,10,12,16,20,24,32 \
    --repeats 20 --json >"$OUT/json/projection_$name.json" 2>"$LOG/projection_$name.err"
  say "bench projection $name ($shape q4): exit $? in $(( $(date +%s) - t0 )) s"
}

models=($MODELS)
first=1
for idx in "${!models[@]}"; do
  spec=${models[$idx]}
  name=${spec%%=*}
  last=$(( idx == ${#models[@]} - 1 ))
  # earlier models leave RESERVE seconds for the last one
  limit() { if [ $last = 1 ]; then left; else echo $(( $(left) - RESERVE )); fi; }
  if [ "$(limit)" -lt 30 ]; then say "skip model $name: $(limit) s usable"; continue; fi
  make_model "$spec" || { say "skip model $name: make-checkpoint failed"; continue; }
  dir=$(model_dir "$spec")
  if [ $first = 1 ] && [ "$MODE" != 27b ] && [ "${NEXTN_SWEEP_GUARD:-1}" = 1 ]; then fault_check "$dir"; fi
  first=0
  projection "$name" "$dir"
  last_s=0
  # one bench verify: tag, rate, cost, arms, extra flags
  verify_run() {
    local tag=$1 rate=$2 cost=$3 arms=$4 extra=$5
    local need=$(( last_s * 14 / 10 + 5 ))
    if [ "$(limit)" -lt "$need" ]; then say "skip $tag: $(limit) s usable, the last run took $last_s s"; return; fi
    local t0=$(date +%s) cap=$(limit)
    [ "$cap" -gt 240 ] && cap=240
    timeout "$cap" "$NEXTN" bench verify --backend "$BACKEND" -m "$dir" --draft oracle --accept-rate "$rate" $extra \
      --draft-cost "$cost" --block-sizes "$KS" --verify "$arms" --repeats "$REPEATS" -n "$N" --json \
      >"$OUT/json/verify_$tag.json" 2>"$LOG/verify_$tag.err"
    local rc=$?
    last_s=$(( $(date +%s) - t0 ))
    say "bench verify $tag (${extra:+$extra, }K $KS, arms $arms, $REPEATS repeats, -n $N): exit $rc in $last_s s"
    [ $rc = 0 ] || { tail -3 "$LOG/verify_$tag.err" | tee -a "$SUMMARY"; }
  }
  for rate in $RATES; do
    for cost in $COSTS; do verify_run "${name}_r${rate}_${cost}" "$rate" "$cost" "$ARMS" ""; done
  done
  for rate in $WHILE_RATES; do
    for cost in $COSTS; do verify_run "${name}_r${rate}_${cost}_while" "$rate" "$cost" batched,walk "--walk while"; done
  done
  case "$spec" in *=@*) ;; *) rm -rf "$dir" ;; esac
done

say "elapsed: $(( $(date +%s) - START )) s"
if [ "$BACKEND" = cuda ]; then
  record_finish
else
  say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
fi
