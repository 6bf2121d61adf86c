#!/usr/bin/env bash
# One call on the GPU machine: record the machine, run the CUDA tests and the
# CLI checks, write logs under $OUT (one tar.gz plus a summary).
#
# The GPU machine has nvcc and cmake but not the project's host dependencies
# (fmt, CLI11, nlohmann-json, GoogleTest), so the binaries are built on the
# development machine and carried (scripts/device/prepare.sh does that):
#
#   scripts/device/prepare.sh            # builds build-cuda/, writes build-cuda/COMMIT
#   device run, carry [build-cuda.tar.xz]:
#     bash scripts/device/run.sh
#
# Environment: NEXTN_BUILD (default build-cuda); NEXTN_DEVICE_BENCH=1 also
# runs the CUDA benchmarks (DISABLED_ in CI); NEXTN_GTEST_FILTER replaces the
# test phases by one; NEXTN_T_{OPS,MODEL,SPEC,GEMMA4,BENCH} are the phase limits (s);
# NEXTN_DEVICE_SYNTH=1 times decoding on a random 0.8B-shape checkpoint;
# NEXTN_UNSEEN_GEMMA4=1 runs scripts/fixtures/check_unseen_gemma4.py on the
# GPU in the fp32 mode (needs torch and transformers, as the machine has);
# NEXTN_UNSEEN_QWEN_MOE=1 runs check_unseen.py's Qwen3.5 MoE variants likewise.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
record_start

link_source_root

status=0
if [ ! -x "$BUILD/nextn_tests" ] || [ ! -x "$BUILD/nextn" ]; then
  say "FAIL: $BUILD/nextn_tests or $BUILD/nextn missing (carry them; see the header of this script)"
  status=1
else
  ldd "$BUILD/nextn_tests" >"$LOG/ldd.txt" 2>&1
  if grep -q "not found" "$LOG/ldd.txt"; then say "FAIL: missing shared libraries:"; grep "not found" "$LOG/ldd.txt" | tee -a "$SUMMARY"; fi

  # 1. the CUDA tests, in phases (a crash or a sticky CUDA error ends one
  # phase only): ops, model parity, speculative == greedy, benchmarks.
  phases=("ops|CudaCli.*:CudaOps.*:CudaFolds.*:CudaGdn.*:CudaHeadOps.*:CudaScaled.*|${NEXTN_T_OPS:-120}"
          "model|*CudaModel.TeacherForced*:*CudaModel.Greedy*:*CudaModel.Graphs*:*CudaModel.RuntimeContract*:CudaHandles.*|${NEXTN_T_MODEL:-120}"
          "spec|*CudaModel.Speculative*:CudaModelStreamed.*:*CudaHead.*:CudaPrefill.*:CudaRows.*:CudaDraftVocab.*:CudaPdl.*:CudaProfile.*:CudaMtpLogits.*:CudaSampledSpeculative.*|${NEXTN_T_SPEC:-300}")
  # The chained launch (tests/test_cuda_chain.cpp; issue 24's persistent prototype) in its
  # own phase: its blocks wait on each other, and a wait that cannot end traps.
  phases+=("chain|CudaChain.*|${NEXTN_T_CHAIN:-90}")
  # Several sequences in one forward (tests/test_cuda_batch.cpp): == each alone.
  phases+=("batch|*CudaBatch.*:CudaBatchSynthetic.*|${NEXTN_T_BATCH:-300}")
  # Gemma 4 (tests/test_cuda_gemma4.cpp): parity, then speculative == greedy.
  phases+=("gemma4|*CudaGemma4.*:*CudaGemma4Group.*:*CudaGemma4Assistant.*:CudaGemma4Errors.*:CudaGemma4Wide.*:*CudaGemma4Spec.*:CudaGemma4Quantized.*|${NEXTN_T_GEMMA4:-300}")
  # Mixture of experts (tests/test_cuda_moe_kernels.cpp, test_cuda_moe.cpp; Gemma 4 MoE is in the gemma4 phase).
  phases+=("moe|CudaMoeKernels.*:Fixtures/CudaMoe.*:Formats/CudaMoeSynthetic.*|${NEXTN_T_MOE:-180}")
  # transformers' formats (tests/test_hf_quant_e2e.cpp): fp32 mode == the dequantized copy and the CPU.
  phases+=("formats|Formats/QuantE2ECuda.*|${NEXTN_T_FORMATS:-240}")
  [ "${NEXTN_DEVICE_BENCH:-0}" = 1 ] && phases+=("bench|CudaBench.*|${NEXTN_T_BENCH:-90}")
  [ -n "${NEXTN_GTEST_FILTER:-}" ] && phases=("custom|$NEXTN_GTEST_FILTER|${NEXTN_T_CUSTOM:-480}")
  for ph in "${phases[@]}"; do
    IFS='|' read -r name filter limit <<<"$ph"
    start=$(date +%s)
    timeout "$limit" "$BUILD/nextn_tests" --gtest_filter="$filter" --gtest_also_run_disabled_tests \
      --gtest_output="xml:$LOG/gtest_$name.xml" >"$LOG/gtest_$name.txt" 2>&1
    rc=$?
    say "gtest $name ($filter): exit $rc in $(( $(date +%s) - start )) s (limit $limit)"
    grep -E "^\[  PASSED  \] [0-9]|^\[  FAILED  \] |^\[  SKIPPED \] [0-9]|tests ran" "$LOG/gtest_$name.txt" | tail -40 >>"$SUMMARY"
    grep -E "^\[cuda|^\[bench|Failure|Expected|Which is|error:" "$LOG/gtest_$name.txt" | head -60 >>"$SUMMARY"
    [ $rc -ne 0 ] && status=1
  done

  # 2. the CLI on the GPU: plain and speculative generate agree at several K
  # (generate runs the batched head; the other arms are bench verify's)
  fx=tests/fixtures/qwen35-causal-tied
  if [ -d "$fx" ]; then
    ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$fx/reference.json'))['prompt_ids'])))")
    "$BUILD/nextn" generate --backend cuda -m "$fx" --prompt-ids "$ids" -n 24 --ignore-eos >"$LOG/cli_greedy.txt" 2>"$LOG/cli_greedy.err"
    say "cli greedy: exit $? tokens: $(head -1 "$LOG/cli_greedy.txt")"
    for K in 2 4 8; do
      "$BUILD/nextn" generate --backend cuda -m "$fx" --prompt-ids "$ids" -n 24 --ignore-eos --draft mtp --block-size $K \
        >"$LOG/cli_k$K.txt" 2>"$LOG/cli_k$K.err"
      rc=$?
      same=no
      cmp -s <(head -1 "$LOG/cli_k$K.txt") <(head -1 "$LOG/cli_greedy.txt") && same=yes
      say "cli mtp K=$K: exit $rc, equals greedy: $same; $(tail -1 "$LOG/cli_k$K.err" | cut -c1-160)"
      { [ $rc -ne 0 ] || [ $same != yes ]; } && status=1
    done
  fi

  # FP8 and GPTQ int4 at the 0.8B shape (hidden 1024: every trunk matrix in
  # its native codec, streamed as FP8 / S4): speculative == greedy at K = 4.
  for q in fp8 gptq4; do
    m=/tmp/nextn-fmt-0.8b-$q
    "$BUILD/nextn" make-checkpoint --preset qwen3.5-0.8b --quant $q --out $m >"$LOG/fmt_$q.txt" 2>&1
    args=(generate --backend cuda -m $m --prompt-ids 1,2,3,4,5,6,7,8 -n 32 --ignore-eos)
    "$BUILD/nextn" "${args[@]}" >"$LOG/fmt_${q}_greedy.txt" 2>"$LOG/fmt_${q}_greedy.err"
    rc=$?
    "$BUILD/nextn" "${args[@]}" --draft mtp --block-size 4 >"$LOG/fmt_${q}_k4.txt" 2>"$LOG/fmt_${q}_k4.err"
    rc2=$?
    same=no
    cmp -s <(head -1 "$LOG/fmt_${q}_k4.txt") <(head -1 "$LOG/fmt_${q}_greedy.txt") && same=yes
    say "formats 0.8b $q: greedy exit $rc, mtp K=4 exit $rc2, equals greedy: $same; $(tail -1 "$LOG/fmt_${q}_greedy.err" | cut -c1-160)"
    { [ $rc -ne 0 ] || [ $rc2 -ne 0 ] || [ $same != yes ]; } && status=1
    if [ $q = fp8 ]; then  # W8A8: speculative == greedy at K = 2 and 4 (its own greedy)
      "$BUILD/nextn" "${args[@]}" --fp8-matmul w8a8 >"$LOG/fmt_w8a8_greedy.txt" 2>"$LOG/fmt_w8a8_greedy.err"
      rc=$?
      for k in 2 4; do
        "$BUILD/nextn" "${args[@]}" --fp8-matmul w8a8 --draft mtp --block-size $k >"$LOG/fmt_w8a8_k$k.txt" 2>&1
        rc2=$?
        same=no
        cmp -s <(head -1 "$LOG/fmt_w8a8_k$k.txt") <(head -1 "$LOG/fmt_w8a8_greedy.txt") && same=yes
        say "formats 0.8b fp8 w8a8: greedy exit $rc, mtp K=$k exit $rc2, equals greedy: $same"
        { [ $rc -ne 0 ] || [ $rc2 -ne 0 ] || [ $same != yes ]; } && status=1
      done
    else  # a checkpoint without FP8 weights refuses W8A8 by name
      "$BUILD/nextn" "${args[@]}" --fp8-matmul w8a8 >/dev/null 2>"$LOG/fmt_w8a8_refused.err"
      rc=$?
      say "formats 0.8b $q --fp8-matmul w8a8: exit $rc: $(head -c 200 "$LOG/fmt_w8a8_refused.err")"
      { [ $rc -ne 1 ] || ! grep -q "has no FP8 weights" "$LOG/fmt_w8a8_refused.err"; } && status=1
    fi
    rm -rf $m
  done

  # Gemma 4 on the CLI (fp32 mode): greedy, and the assistant at K = 2, 4, 6, give transformers' tokens.
  gx=tests/fixtures/gemma4/gemma4-kv-shared-fp32
  if [ -d "$gx" ]; then
    ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$gx/reference.json'))['prompt_ids'])))")
    want=$(python3 -c "import json;print(json.load(open('$gx/reference.json'))['greedy_tokens'])" | tr -d ' ')
    for draft in none "$gx/assistant"; do
      for K in 2 4 6; do
        [ "$draft" = none ] && [ "$K" != 2 ] && continue
        extra=()
        [ "$draft" != none ] && extra=(--draft "$draft" --block-size "$K")
        "$BUILD/nextn" generate --backend cuda --act fp32 -m "$gx/target" --prompt-ids "$ids" -n 24 \
          --ignore-eos --json "${extra[@]}" >"$LOG/cli_gemma4.txt" 2>"$LOG/cli_gemma4.err"
        rc=$?
        got=$(python3 -c "import json,sys;print(json.load(open('$LOG/cli_gemma4.txt'))['tokens'])" 2>/dev/null | tr -d ' ')
        same=no
        [ -n "$got" ] && [ "$got" = "$want" ] && same=yes
        say "cli gemma4 draft=$(basename "$draft") K=$K: exit $rc, equals transformers: $same; $(tail -1 "$LOG/cli_gemma4.err" | cut -c1-160)"
        { [ $rc -ne 0 ] || [ $same != yes ]; } && status=1
      done
    done
  fi

  # Gemma 4 checkpoints no test has seen (new seeds, sizes, windows; MoE
  # targets among them), made by transformers here: the GPU in the fp32 mode
  # gives transformers' greedy tokens, plainly and with the assistant at
  # K = 2, 3, 5, 8. NEXTN_UNSEEN_GEMMA4_ONLY: "--only NAME ..." of the script.
  if [ "${NEXTN_UNSEEN_GEMMA4:-0}" = 1 ]; then
    # shellcheck disable=SC2086
    timeout "${NEXTN_T_UNSEEN:-300}" python3 scripts/fixtures/check_unseen_gemma4.py \
      --nextn "$BUILD/nextn" --backend cuda ${NEXTN_UNSEEN_GEMMA4_ONLY:-} >"$LOG/unseen_gemma4.txt" 2>&1
    rc=$?
    say "unseen gemma4 (cuda, fp32 mode): exit $rc; $(tail -1 "$LOG/unseen_gemma4.txt")"
    grep -v ": ok$" "$LOG/unseen_gemma4.txt" | head -20 >>"$SUMMARY"
    [ $rc -ne 0 ] && status=1
  fi
  # Qwen3.5 MoE checkpoints no test has seen (scripts/fixtures/check_unseen.py's
  # um-* variants: per-expert, stacked, top-k = E, mlx switch_mlp q4), made by
  # transformers here: the fp32 mode gives transformers' greedy tokens and MTP
  # drafts, and speculative == greedy at K = 2, 3, 5.
  if [ "${NEXTN_UNSEEN_QWEN_MOE:-0}" = 1 ]; then
    only=()
    for v in um-e16k4-h64 um-cond-e8k2-stacked um-e4k4 um-e12k3-mlx-q4; do only+=(--only "$v"); done
    timeout "${NEXTN_T_UNSEEN:-300}" python3 scripts/fixtures/check_unseen.py --nextn "$BUILD/nextn" --backend cuda \
      "${only[@]}" >"$LOG/unseen_qwen_moe.txt" 2>&1
    rc=$?
    say "unseen qwen3.5 moe (cuda, fp32 mode): exit $rc; $(tail -1 "$LOG/unseen_qwen_moe.txt")"
    grep -E "^\| um|FAIL|Error|error" "$LOG/unseen_qwen_moe.txt" | head -20 >>"$SUMMARY"
    [ $rc -ne 0 ] && status=1
  fi
fi

  # 3. decode speed on a random-weight checkpoint at the Qwen3.5-0.8B shape
  # (bf16, and MLX q4 g64 made by nextn quantize): plain greedy, and the
  # an oracle drafter at acceptance 0.8, K = 4 (the arms: bench verify).
  if [ "${NEXTN_DEVICE_SYNTH:-0}" = 1 ]; then
    S=/tmp/nextn-synth-0.8b
    python3 scripts/device/make_synthetic.py --shape 0.8b --out $S >"$LOG/synth.txt" 2>&1 &&
      "$BUILD/nextn" quantize -m $S -o $S-q4 >>"$LOG/synth.txt" 2>&1
    say "synthetic 0.8b: $(grep -h wrote "$LOG/synth.txt" | tr '\n' ' ')"
    ids=$(seq -s, 1 16)
    for m in $S $S-q4; do
      for run in "none" "oracle"; do
        set -- $run
        args=(generate --backend cuda -m "$m" --prompt-ids "$ids" -n 256 --ignore-eos)
        [ "$1" = oracle ] && args+=(--draft oracle --accept-rate 0.8 --block-size 4)
        for rep in 1 2; do
          "$BUILD/nextn" "${args[@]}" >/dev/null 2>"$LOG/synth_run.err"
          rc=$?
          say "synth $(basename "$m") $run rep $rep: exit $rc; $(tail -1 "$LOG/synth_run.err" | grep -o 'rounds.*' | cut -c1-220)"
        done
      done
    done
  fi

say "status: $([ $status = 0 ] && echo PASS || echo FAIL)"
record_finish
cat "$SUMMARY"
exit $status
