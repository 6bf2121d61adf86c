#!/usr/bin/env bash
# nextn vs llama.cpp on the CPU, same machine, same model, engines alternated.
#
#   scripts/peer/cpu_peer.sh LLAMA_SRC [REPEATS]
#
# LLAMA_SRC: a llama.cpp (or ik_llama.cpp) source tree, e.g. a fetched
# snapshot of github.com/ggml-org/llama.cpp. The script
#  1. builds it for this CPU (build-cpu-peer/ inside LLAMA_SRC: GGML_NATIVE,
#     no GPU backends, no curl, no server: in newer trees llama-cli and
#     llama-server need a web UI built with npm or downloaded while building,
#     and neither is run here);
#  2. converts the model (default models/nextn-code-15m, MTP head included)
#     to GGUF with LLAMA_SRC's convert_hf_to_gguf.py, bf16 and f16. The
#     default model's tokenizer is its own BPE vocabulary with Qwen3.5's
#     pre-tokenizer regex, whose hash the converter cannot know: an unknown
#     hash is mapped to the "qwen35" pre-tokenizer (scripts/peer/convert_qwen35.py);
#  3. checks that both engines give the same greedy text for the prompt,
#     with and without MTP, over the GEN_TOKENS tokens that step 4 times
#     (stops at EOS, as both engines do by default).
#     The peer's greedy runs go through llama-completion (llama-cli in trees
#     without it); its MTP runs through llama-speculative-simple where the
#     tree has it and knows `draft-mtp` (llama-completion cannot speculate),
#     else through the same completion tool (ik_llama.cpp's llama-cli);
#  4. times, alternating the engines each repeat (order flipped every other
#     repeat): decode 128 tokens and prefill 512 tokens (`nextn bench decode`
#     vs `llama-bench`), and greedy and MTP generation of GEN_TOKENS tokens
#     through each CLI (--ignore-eos), each timed by the engine's own decode
#     timer inside the process, which leaves out process start, model load
#     and the prompt's prefill:
#       nextn: `generate --json`'s stats.decode_ms, from the end of the
#         prefill step (prompt forward, first token, MTP seeded) to the last
#         token; tokens: stats.generated - 1 (the first comes from the prefill);
#       llama.cpp greedy (llama-completion): its perf print's "eval time"
#         (the single-token llama_decode calls, to the logits' readout) plus
#         "sampling time" (the argmax; nextn's decode_ms includes its own);
#         tokens: eval time's runs (GEN_TOKENS - 1: the first token is
#         sampled from the prompt's logits);
#       llama.cpp MTP (llama-speculative-simple): its "decoded N tokens in
#         T seconds", the whole decode loop after the prompt (drafts, verify,
#         sampling) for its N tokens (the first included: it forwards the
#         prompt's last token inside that loop).
#     MTP through a completion tool (no llama-speculative-simple in the tree)
#     has no such timer: its verify batches count as "prompt eval" in the
#     perf print, so the peer's MTP column is left empty (n/a) there.
#     llama.cpp logs through a thread that can lose its last lines when the
#     process exits (llama.cpp issue 22142): a run whose timer line is missing
#     is repeated, up to 3 times, then left out (failures.log);
#  5. writes docs/benchmark_results/cpu-peer-<date>.md and .json
#     (scripts/peer/cpu_peer_report.py) and keeps the raw runs next to them.
#     The GGUFs and the build and conversion logs stay in build-cpu-peer/,
#     outside the record (tens of MB, not for the repository).
#
# GEN_TOKENS (default 512) is the generation length. The wall-clock timing it
# replaces, wall(-n 128) - wall(-n 1), was noise on the default model: 127
# tokens take 0.15-0.35 s there while process start and load vary by
# 0.1-0.25 s. With the in-process timers start and load no longer count, and
# 512 tokens make each timed part 0.4-0.8 s on 2 threads (nextn ~900-1100
# tokens/s, llama.cpp ~650-850), long against the timers' resolution and a
# scheduler hiccup; the default prompt gives no EOS within 512 tokens (the
# report says when nextn's text stops earlier: past an EOS the engines'
# --ignore-eos differ, nextn keeping the EOS and going on, llama.cpp masking
# it, so the timed tokens and MTP acceptances may differ there), and 512
# stays far inside the model's 4096 positions.
#
# Environment: GEN_TOKENS (default 512, above), THREADS (default 2), NEXTN
# (default build/nextn), MODEL (default models/nextn-code-15m), PROMPT
# (default "def fibonacci(n):"),
# MTP_DRAFTS (default 2: nextn --block-size MTP_DRAFTS+1, llama.cpp
# --spec-draft-n-max MTP_DRAFTS), LLAMA_MTP_ARGS (default
# "--spec-type draft-mtp --spec-draft-n-max $MTP_DRAFTS"; ik_llama.cpp
# spells it differently: pass its flags here), WEIGHT_TYPES (default
# "bf16 f16"), OUT (default docs/benchmark_results), NEXTN_ONLY=1 (skip the
# peer entirely: build, conversion and its runs; a check of nextn's side and
# of the report, LLAMA_SRC is then not read), LLAMA_MTP_TOOL (a binary name
# in the peer's build/bin for the MTP runs, overriding the choice in 3.),
# PEER_COMMIT (the peer's commit for the record, for a tree without git
# metadata such as a release tarball or a Python package's vendored copy).
# Needs python3 with torch, numpy, transformers, safetensors (the converter's
# own requirements), cmake and a C++ compiler.
set -euo pipefail
src=${1:?usage: cpu_peer.sh LLAMA_SRC [REPEATS]}
repeats=${2:-5}
nextn_only=${NEXTN_ONLY:-0}
[ "$nextn_only" = 1 ] || src=$(cd "$src" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
threads=${THREADS:-2}
nextn=${NEXTN:-$here/build/nextn}
model=${MODEL:-$here/models/nextn-code-15m}
prompt=${PROMPT:-def fibonacci(n):}
drafts=${MTP_DRAFTS:-2}
gen=${GEN_TOKENS:-512}
llama_mtp_args=${LLAMA_MTP_ARGS:---spec-type draft-mtp --spec-draft-n-max $drafts}
weight_types=${WEIGHT_TYPES:-bf16 f16}
date=$(date -u +%Y-%m-%d)
out=${OUT:-$here/docs/benchmark_results}
raw=$out/cpu-peer-$date-raw
mkdir -p "$raw"
runs=$raw/runs.jsonl
: > "$runs"
log() { echo "[cpu_peer] $*" >&2; }

[ -x "$nextn" ] || { log "no nextn binary at $nextn (build it first)"; exit 1; }
peer_commit=none
complete_tool=none
mtp_tool=none
mtp_timer=none
declare -A gguf=()
if [ "$nextn_only" = 1 ]; then
  weight_types=""
else
# 1. Build the peer.
build=$src/build-cpu-peer
mkdir -p "$build"
log "building $src -> $build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF \
  -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >"$build/cpu-peer-cmake.log" 2>&1 \
  || { log "error: cmake configure of $src failed, see $build/cpu-peer-cmake.log"; exit 1; }
# The one-shot completion tool: llama-completion where it exists (newer
# trees, whose llama-cli is a chat UI), else llama-cli without conversation.
if grep -qs "llama-completion" "$src"/tools/*/CMakeLists.txt; then complete_tool=llama-completion; else complete_tool=llama-cli; fi
if [ -n "${LLAMA_MTP_TOOL:-}" ]; then
  mtp_tool=$LLAMA_MTP_TOOL
elif [ -f "$src/examples/speculative-simple/CMakeLists.txt" ] && grep -qs "draft-mtp" "$src/common/speculative.cpp"; then
  mtp_tool=llama-speculative-simple
else
  mtp_tool=$complete_tool
fi
# The peer's decode timer for its MTP runs (4. above): none through a completion tool.
if [ "$mtp_tool" = llama-speculative-simple ]; then mtp_timer=decoded; else mtp_timer=none; fi
targets=(llama-bench "$complete_tool")
[ "$mtp_tool" = "$complete_tool" ] || targets+=("$mtp_tool")
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build/cpu-peer-build.log" 2>&1 \
  || { log "error: building ${targets[*]} in $build failed, see $build/cpu-peer-build.log"; exit 1; }
bin=$build/bin
complete=("$bin/$complete_tool" -no-cnv)
# llama-speculative-simple takes no -no-cnv and always echoes the prompt
# (stripped in llama_text). It stops only once it has produced more than -n
# tokens, and a draft limit that falls to 0 near the end means no limit, so
# it gives between n + 1 and n + 1 + drafts tokens: its own count ("n_predict
# = N" on stderr) is recorded with each timed run, and its text is compared
# by its start (cpu_peer_report.py); its "decoded N tokens" counts them all.
if [ "$mtp_tool" = llama-speculative-simple ]; then mtp=("$bin/$mtp_tool"); else mtp=("$bin/$mtp_tool" -no-cnv); fi
peer_commit=${PEER_COMMIT:-$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)}

# 2. Convert, every run: the model or the converter may have changed since
# the last one, and a conversion of the default model takes seconds.
mkdir -p "$build/gguf"
for wt in $weight_types; do
  gguf[$wt]=$build/gguf/$(basename "$model")-$wt.gguf
  log "converting $model -> ${gguf[$wt]}"
  python3 "$here/scripts/peer/convert_qwen35.py" "$src" "$model" "${gguf[$wt]}" "$wt" >"${gguf[$wt]%.gguf}.log" 2>&1 \
    || { log "error: conversion to $wt failed, see ${gguf[$wt]%.gguf}.log"; exit 1; }
done
fi

record() { printf '%s\n' "$1" >> "$runs"; }

# The stderr of the last timed generation, for its timer.
gen_err=$(mktemp)
trap 'rm -f "$gen_err"' EXIT
log_failure() {  # $1: rc, then the command
  local rc=$1; shift
  { cat "$gen_err"; echo "failed ($rc): $*"; } >>"$raw/failures.log"
}

# 3. Token equality: greedy text of each engine, with and without MTP.
nextn_text() {  # $1: none|mtp; keeps the JSON (tokens) in the raw folder
  local cmd=("$nextn" generate -m "$model" --prompt "$prompt" -n "$gen" --threads "$threads" --draft "$1")
  [ "$1" = mtp ] && cmd+=(--block-size $((drafts + 1)))
  "${cmd[@]}" --json | tee "$raw/nextn-$1.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["text"], end="")'
}
# The peer's command line for $1 (none|mtp) and $2 tokens, into peer_cmd.
peer_cmd=()
set_peer_cmd() {
  if [ "$1" = mtp ]; then
    # shellcheck disable=SC2206
    peer_cmd=("${mtp[@]}" -n "$2" $llama_mtp_args)
  else
    peer_cmd=("${complete[@]}" -n "$2")
  fi
}
llama_text() {  # $1: gguf, $2: none|mtp, $3: stderr log; a failed run leaves its error there
  local echoed=0
  set_peer_cmd "$2" "$gen"
  if [ "$2" = mtp ] && [ "$mtp_tool" = llama-speculative-simple ]; then echoed=1; else peer_cmd+=(--no-display-prompt); fi
  { "${peer_cmd[@]}" -m "$1" -p "$prompt" -t "$threads" --temp 0 --top-k 1 --seed 1 2>"$3" \
    || echo "[llama run failed: $3]"; } |
    PEER_PROMPT=$prompt PEER_ECHOED=$echoed python3 -c '
import os, sys
t = sys.stdin.read()
echo = "\n\n" + os.environ["PEER_PROMPT"]  # what llama-speculative-simple prints before the generated text
if os.environ["PEER_ECHOED"] == "1" and t.startswith(echo):
    t = t[len(echo):]
print(t.replace(" [end of text]", "").rstrip("\n"), end="")'
}
nextn_greedy=$(nextn_text none)
nextn_mtp=$(nextn_text mtp)
printf '%s' "$nextn_greedy" > "$raw/text-nextn-greedy.txt"
printf '%s' "$nextn_mtp" > "$raw/text-nextn-mtp.txt"
for wt in $weight_types; do
  llama_text "${gguf[$wt]}" none "$raw/llama-$wt-greedy.err" > "$raw/text-llama-$wt-greedy.txt"
  llama_text "${gguf[$wt]}" mtp "$raw/llama-$wt-mtp.err" > "$raw/text-llama-$wt-mtp.txt"
done

# 4. Timing, alternated.
nextn_bench() {
  "$nextn" bench decode -m "$model" --threads "$threads" -n 128 --prompt-len 1 --prefill-len 512 --repeats 1 --json
}
llama_bench() {  # $1: gguf; on one line (runs.jsonl), [] when it fails
  local out
  out=$("$bin/llama-bench" -m "$1" -t "$threads" -p 512 -n 128 -r 1 -o json 2>>"$raw/failures.log") || out="[]"
  printf '%s' "$out" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))' 2>>"$raw/failures.log" \
    || echo "[]"
}
# One timed generation of $gen tokens: a JSON object (the engine's own decode
# timer and what it counted), or null when the run fails or prints no timer
# (failures.log); the report turns it into tokens/s.
nextn_gen() {  # $1: none|mtp
  local cmd out rc=0
  cmd=("$nextn" generate -m "$model" --prompt "$prompt" -n "$gen" --ignore-eos --threads "$threads" --draft "$1")
  [ "$1" = mtp ] && cmd+=(--block-size $((drafts + 1)))
  out=$("${cmd[@]}" --json 2>"$gen_err") || rc=$?
  if [ "$rc" = 0 ] && printf '%s' "$out" | python3 -c '
import json, sys
s = json.load(sys.stdin)["stats"]
print(json.dumps({"tokens": s["generated"] - 1, "decode_ms": s["decode_ms"], "prefill_ms": s["prefill_ms"],
                  "drafted": s["drafted"], "accepted": s["accepted"], "stop": s["stop"]}))' 2>>"$gen_err"; then
    return
  fi
  log_failure "$rc" "${cmd[@]}"
  echo null
}
llama_gen() {  # $1: gguf, $2: none|mtp, $3: timer (eval|decoded)
  local try rc
  set_peer_cmd "$2" "$gen"
  peer_cmd+=(-m "$1" -p "$prompt" -t "$threads" --temp 0 --top-k 1 --seed 1 --ignore-eos)
  for try in 1 2 3; do
    rc=0
    "${peer_cmd[@]}" >/dev/null 2>"$gen_err" || rc=$?
    if [ "$rc" = 0 ] && python3 "$here/scripts/peer/cpu_peer_report.py" parse-peer-stderr "$gen_err" "$3"; then
      return
    fi
    log_failure "$rc" "(try $try, timer $3)" "${peer_cmd[@]}"
    [ "$rc" = 0 ] || break  # a failing command fails again; a lost log line may not
  done
  echo null
}
run_nextn() {
  record "{\"engine\":\"nextn\",\"repeat\":$1,\"kind\":\"bench\",\"result\":$(nextn_bench)}"
  for d in none mtp; do
    record "{\"engine\":\"nextn\",\"repeat\":$1,\"kind\":\"generate\",\"draft\":\"$d\",\"timer\":\"decode_ms\",\"result\":$(nextn_gen $d)}"
  done
}
run_llama() {
  for wt in $weight_types; do
    record "{\"engine\":\"llama-$wt\",\"repeat\":$1,\"kind\":\"bench\",\"result\":$(llama_bench "${gguf[$wt]}")}"
    record "{\"engine\":\"llama-$wt\",\"repeat\":$1,\"kind\":\"generate\",\"draft\":\"none\",\"timer\":\"eval\",\"result\":$(llama_gen "${gguf[$wt]}" none eval)}"
    [ "$mtp_timer" = none ] && continue
    record "{\"engine\":\"llama-$wt\",\"repeat\":$1,\"kind\":\"generate\",\"draft\":\"mtp\",\"timer\":\"$mtp_timer\",\"result\":$(llama_gen "${gguf[$wt]}" mtp "$mtp_timer")}"
  done
}
for ((r = 1; r <= repeats; ++r)); do
  log "repeat $r/$repeats (load $(cut -d' ' -f1-3 /proc/loadavg))"
  if ((r % 2)); then run_nextn $r; run_llama $r; else run_llama $r; run_nextn $r; fi
done

# 5. Report.
python3 "$here/scripts/peer/cpu_peer_report.py" --raw "$raw" --out "$out/cpu-peer-$date" --threads "$threads" \
  --drafts "$drafts" --gen-tokens "$gen" --prompt "$prompt" --peer-src "$src" --peer-commit "$peer_commit" \
  --llama-mtp-args "$llama_mtp_args" --llama-mtp-tool "$mtp_tool" --llama-complete-tool "$complete_tool" \
  --nextn-commit "$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)" \
  --weight-types "$weight_types"
log "wrote $out/cpu-peer-$date.md and .json (raw runs in $raw)"
