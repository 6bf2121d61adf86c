#!/usr/bin/env bash
# Greedy vs MTP speculative decoding on the shipped default model, through
# `nextn generate` (the production path), on one backend: R repeats, the
# configurations interleaved, each run's --json stats kept as one line.
#
#   scripts/bench_default_model.sh BACKEND [REPEATS] [N] > runs.jsonl
#   python3 scripts/bench_default_model_table.py runs.jsonl
#
# Environment: NEXTN (binary, default build/nextn), NEXTN_MODEL (default: the
# shipped model), NEXTN_DRAFT_VOCABS (e.g. "4096 1024": adds the configuration
# mtp4-dvN, K = 4 with --draft-vocab N, per value). Prompts: two code prompts as token ids of the default model's
# tokenizer ("def fibonacci(n):" and "import os\nimport sys\n\n\ndef main(argv):\n    \"\"\"").
set -euo pipefail
backend=${1:?backend: cpu or cuda}
repeats=${2:-5}
n=${3:-128}
bin=${NEXTN:-build/nextn}
model=()
[ -n "${NEXTN_MODEL:-}" ] && model=(-m "$NEXTN_MODEL")
prompts=("fib:297,289,2474,269,726,686,1202,1359" "main:619,572,198,619,695,792,297,2606,3721,85,292,258,419")
configs=("none:--draft none" "mtp3:--draft mtp --block-size 3" "mtp4:--draft mtp --block-size 4")
for v in ${NEXTN_DRAFT_VOCABS:-}; do configs+=("mtp4-dv$v:--draft mtp --block-size 4 --draft-vocab $v"); done
for r in $(seq 1 "$repeats"); do
  for p in "${prompts[@]}"; do
    # ABBA-style: the configuration order flips every repeat.
    order=("${configs[@]}")
    if [ $((r % 2)) -eq 0 ]; then
      order=()
      for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done
    fi
    for c in "${order[@]}"; do
      out=$("$bin" generate "${model[@]}" --backend "$backend" --prompt-ids "${p#*:}" -n "$n" --ignore-eos ${c#*:} --json)
      printf '{"backend":"%s","repeat":%d,"prompt":"%s","config":"%s","result":%s}\n' "$backend" "$r" "${p%%:*}" "${c%%:*}" "$out"
    done
  done
done
