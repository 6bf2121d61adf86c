#!/usr/bin/env bash
# CPU decode rates of two nextn builds, runs interleaved (A, B, A, B, ...) so
# load changes on a shared machine hit both alike. Each run is one
# `nextn generate --json` on a fresh process (64-token synthetic prompt, EOS
# ignored); prints tokens/s median [min, max] per build and setting.
#   scripts/bench_cpu_decode.sh MODEL_DIR REPEATS "THREADS..." "DRAFTS..." NAME=BINARY...
# e.g. scripts/bench_cpu_decode.sh /tmp/small-q4 5 "1 2" "none mtp" before=/tmp/old/nextn after=build/nextn
# Threads go through NEXTN_THREADS (a build without threads ignores it).
set -euo pipefail
model=$1 repeats=$2 threads=$3 drafts=$4
shift 4
prompt=$(python3 -c 'print(",".join(str((i * 7919 + 13) % 2048) for i in range(64)))')
n=64
echo "model $model | $(nproc) cores | load average $(cut -d' ' -f1-3 /proc/loadavg) | $n tokens, prompt 64, $repeats repeats"
for t in $threads; do
  for d in $drafts; do
    declare -A rates=()
    for ((r = 0; r < repeats; ++r)); do
      for nb in "$@"; do
        name=${nb%%=*} bin=${nb#*=}
        out=$(NEXTN_THREADS=$t "$bin" generate -m "$model" --prompt-ids "$prompt" -n $n --ignore-eos --draft "$d" --json)
        rate=$(python3 -c 'import json,sys; s=json.loads(sys.argv[1])["stats"]; print(s["tokens_per_second"], s["acceptance"])' "$out")
        rates[$name]="${rates[$name]:-} ${rate%% *}"
        acc=${rate##* }
      done
    done
    for nb in "$@"; do
      name=${nb%%=*}
      python3 - "$name" "$t" "$d" "$acc" ${rates[$name]} <<'PY'
import statistics, sys
name, t, d, acc, *xs = sys.argv[1:]
xs = [float(x) for x in xs]
print(f"{name:>8} threads {t} draft {d:<4} tokens/s {statistics.median(xs):7.1f} [{min(xs):.1f}, {max(xs):.1f}]  acceptance {float(acc):.3f}")
PY
    done
    unset rates
  done
done
