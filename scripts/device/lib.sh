# Shared by the device scripts (sourced, not run, right after `cd` to the
# repository root): their common settings, the summary line writer, the
# machine record before and after a run, budgeted steps.
ROOT=$PWD
OUT=${OUT:-$ROOT/out}              # what the call brings back
BUILD=${NEXTN_BUILD:-build-cuda}   # the carried binaries (prepare.sh)
LOG=$OUT/logs
SUMMARY=$OUT/summary.txt
export LD_LIBRARY_PATH="$ROOT/$BUILD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"

say() { echo "$*" | tee -a "$SUMMARY"; }

gpu_state() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,utilization.gpu,power.draw,memory.used,memory.total \
    --format=csv 2>&1
}

# The test binary has the development machine's absolute paths compiled in
# (fixtures, the nextn binary): make them resolve here. Expects ROOT too.
link_source_root() {
  local src
  # The most frequent match: the linker's merged strings also yield odd ones
  # (".../testsn/tests/fixtures" beside ".../tests/fixtures").
  src=$(grep -a -o '/[[:alnum:]_./-]*/tests/fixtures' "$BUILD/nextn_tests" 2>/dev/null | sort | uniq -c | sort -rn |
    awk 'NR == 1 {print $2}' | sed 's#/tests/fixtures$##')
  if [ -n "$src" ] && [ "$src" != "$ROOT" ] && [ ! -e "$src" ]; then
    mkdir -p "$(dirname "$src")" && ln -s "$ROOT" "$src"
    say "linked $src -> $ROOT"
  fi
}

# The binaries travel as one xz archive (prepare.sh): the tracked tree is near
# 56 MiB and a call carries 64 MiB in all, the stripped binaries about 47 MB.
unpack_carry() {
  if [ -f "$BUILD.tar.xz" ] && [ ! -x "$BUILD/nextn_tests" ]; then
    tar xJf "$BUILD.tar.xz"
  fi
}

# Commit, date, machine (logs/machine.txt), GPU state and host load before the run.
record_start() {
  unpack_carry
  mkdir -p "$LOG"
  : >"$SUMMARY"
  say "commit: $(cat "$BUILD/COMMIT" 2>/dev/null | tr '\n' ' ' || echo unknown)"
  say "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  { uname -a; cat /etc/os-release 2>/dev/null | head -2; nproc; uptime; free -g; df -h /tmp; nvcc --version 2>&1 | tail -2
    nvidia-smi; } >"$LOG/machine.txt" 2>&1
  gpu_state >"$LOG/gpu_before.csv"
  say "gpu before: $(tail -1 "$LOG/gpu_before.csv")"
  say "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# GPU state and host load after the run; packs logs/ into logs.tar.gz.
record_finish() {
  gpu_state >"$LOG/gpu_after.csv"
  say "gpu after: $(tail -1 "$LOG/gpu_after.csv")"
  say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
}

# cuBLAS (the prefill GEMM) from the toolkit, else from the Python wheels:
# sets CUBLAS_DIR and puts it, the carried libraries and the toolkit's on
# LD_LIBRARY_PATH. Expects ROOT and BUILD.
export_cuda_libs() {
  CUBLAS_DIR=/usr/local/cuda/lib64
  [ -e "$CUBLAS_DIR/libcublas.so.13" ] || CUBLAS_DIR=$(dirname "$(find / -name 'libcublas.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH="$ROOT/$BUILD/lib:$CUBLAS_DIR:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
}

# Seconds left of $BUDGET since $START (the scripts that time steps set both).
left() { echo $((BUDGET - ($(date +%s) - START))); }

# step_limit NAME LIMIT: prints a step's time limit, LIMIT or what is left of
# the budget if less, so that a call ends inside it; with fewer than 20 s
# left it says the step is skipped and fails.
step_limit() {
  local left_s
  left_s=$(left)
  if [ "$left_s" -lt 20 ]; then say "skip $1: $left_s s of the budget left" >&2; return 1; fi
  echo $(( $2 < left_s ? $2 : left_s ))
}

# run_step NAME LIMIT COMMAND...: runs the command within step_limit, logs its
# output to $LOG/NAME.txt and copies its summary lines into the summary.
run_step() {
  local name=$1 limit
  limit=$(step_limit "$1" "$2") || return 0
  shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$LOG/$name.txt" 2>&1
  say "$name: exit $? in $(( $(date +%s) - t0 )) s: $*"
  grep -E "tokens/s|ms per round|roofline|peak device|at the peak|error:" "$LOG/$name.txt" | grep -v '^{' | sed 's/^/    /' | tee -a "$SUMMARY" >/dev/null
}

# json_step NAME LIMIT ARGS...: run_step for a `bench decode` command, with
# --json: the object goes to $OUT/json/NAME.json (NAME may name a folder:
# at most 8 files a folder come back), stderr to the step's log, and the
# summary gets the step's decode tokens/s (and ms per round).
json_step() {
  local name=$1 limit
  limit=$(step_limit "$1" "$2") || return 0
  shift 2
  mkdir -p "$(dirname "$OUT/json/$name")" "$(dirname "$LOG/$name")"
  local t0=$(date +%s)
  timeout "$limit" "$@" --json >"$OUT/json/$name.json" 2>"$LOG/$name.txt"
  say "$name: exit $? in $(( $(date +%s) - t0 )) s: $*"
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
print("    decode tok/s", j["decode_tokens_per_second"], "ms per round", j.get("decode_ms_per_round"))' \
    "$OUT/json/$name.json" >>"$SUMMARY" 2>&1
}

# A random q4 checkpoint of preset $1 in $CK/serve-$1-q4 (made once per
# machine) with a tokenizer whose every id has text (wide_tokenizer.py): the
# serving benchmarks time text events, and the default tokenizer's 8192 ids
# leave most of a 248320-id model's tokens without any. Prints its directory.
# Expects CK too.
serve_checkpoint() {
  local dir=$CK/serve-$1-q4 t0 vocab
  t0=$(date +%s)
  if [ ! -d "$dir" ]; then
    "$BUILD/nextn" make-checkpoint --preset "$1" --quant q4 --seed 0 --out "$dir" >"$LOG/make.txt" 2>&1
    say "make-checkpoint $1 q4: exit $? in $(( $(date +%s) - t0 )) s" >&2
  fi
  vocab=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('text_config', c)['vocab_size'])" "$dir/config.json")
  python3 scripts/device/wide_tokenizer.py models/default/tokenizer.json "$vocab" "$dir/tokenizer.json"
  cp models/default/tokenizer_config.json "$dir/"
  echo "$dir"
}
