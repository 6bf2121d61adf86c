#!/usr/bin/env bash
# Issue 24's fold and chain decisions, one device call: each fold against its
# op's own kernel then the matmul at 1 to 8 rows on the 27B, 4B and 0.8B
# shapes (`nextn bench projection --fold`), then the chained launches
# against a launch per projection (`nextn bench chain`): the 0.8B's MLPs in
# one chain, and a chain per layer (GDN out, MLP, next GDN in) on the 0.8B
# (every layer), the 4B and the 27B (16 layers each). Every step's --json output to
# $OUT/json/ and its times in the summary; a step that exits non-zero says
# so there (a bits check that fails exits 1).
#
#   scripts/device/prepare.sh     # here: builds build-cuda/
#   device run, carry [build-cuda.tar.xz]:  bash scripts/device/fold_chain.sh
#
# Environment: NEXTN_BENCH_BUDGET seconds (400), NEXTN_FOLD_REPEATS (20),
# NEXTN_CHAIN_REPEATS (20).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_BENCH_BUDGET:-400}
START=$(date +%s)
N=$BUILD/nextn
record_start
mkdir -p "$OUT/json"
FR=${NEXTN_FOLD_REPEATS:-20}
CR=${NEXTN_CHAIN_REPEATS:-20}

# bench NAME LIMIT ARGS...: nextn ARGS --json to $OUT/json/NAME.json (stderr
# to the log); the summary gets each row count's times.
bench() {
  local name=$1 limit
  limit=$(step_limit "$1" "$2") || return 0
  shift 2
  local t0=$(date +%s)
  timeout "$limit" "$N" "$@" --json >"$OUT/json/$name.json" 2>"$LOG/$name.txt"
  say "$name: exit $? in $(( $(date +%s) - t0 )) s: nextn $*"
  python3 - "$OUT/json/$name.json" >>"$SUMMARY" 2>&1 <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(print("    no JSON (its log says why)"))
if "fold" in j:
    print(f"    {j['shape']} fold {j['fold']}: same bits {j['fold_equal']}; us fold / unfolded:",
          ", ".join(f"T={r['W']} {r['ms'] * 1e3:.1f} / {r['unfolded_ms'] * 1e3:.1f}" for r in j["rows"]))
else:
    print(f"    {j['preset']} {j['layers']} layers, links {j['links']}: same bits {j['bits_equal']}; us chain / launches:",
          ", ".join(f"T={r['T']} {r['chain_us']:.0f} / {r['launches_us']:.0f}" for r in j["rows"]))
PY
}

# The folds: gate_up (norm) and down (SwiGLU) of each size, q4 group 64.
for shape in "27b 34816x5120 5120x17408" "4b 18432x2560 2560x9216" "0.8b 7168x1024 1024x3584"; do
  set -- $shape
  bench "fold_norm_$1" 60 bench projection --shape "$2" --fold norm --widths 1,2,4,5,8 --repeats "$FR"
  bench "fold_swiglu_$1" 60 bench projection --shape "$3" --fold swiglu --widths 1,2,4,5,8 --repeats "$FR"
done
# The chain: every 0.8B layer's MLP in one launch, then a launch per layer of
# GDN out + MLP + next GDN in; 16 layers of the 4B and the 27B (the 27B's 64
# take 10 GB and long to fill).
bench chain_mlp_0.8b 90 bench chain --preset qwen3.5-0.8b --rows 1,2,4,8 --repeats "$CR"
bench chain_layer_0.8b 90 bench chain --preset qwen3.5-0.8b --links layer --rows 1,2,4,8 --repeats "$CR"
bench chain_layer_4b 90 bench chain --preset qwen3.5-4b --links layer --layers 16 --rows 1,4,8 --repeats "$CR"
bench chain_layer_27b 120 bench chain --preset qwen3.5-27b --links layer --layers 16 --rows 1,4,8 --repeats "$CR"
record_finish
