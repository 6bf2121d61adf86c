#!/usr/bin/env bash
# Issue 12's record, one device call: whole-model decode and prefill at the
# real Qwen3.5 shapes (random q4 checkpoints written here by
# `nextn make-checkpoint`, never committed), with the current defaults
# (prefill GEMM; PDL off since decode-h200-2026-12-05c) and an earlier state
# (NEXTN_RECORD_BEFORE, e.g. "--pdl on") timed in the same call, the per-operation
# breakdown (bench decode --breakdown), and MTP rounds at K = 4 and 8
# (ms per round against ms per greedy token). Each new-binary step's
# `--json` output goes to $OUT/json/, and scripts/decode_record_json.py
# writes issue 24's summary rows from them ($OUT/decode-record.json); json/
# then comes back as one archive, $OUT/json.tar.gz.
#
#   scripts/device/prepare.sh     # here: builds build-cuda/
#   device run, carry [build-cuda/nextn, build-cuda/lib, build-cuda/COMMIT]:
#     bash scripts/device/decode_record.sh
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_RECORD_SIZES ("0.8b 4b 27b"),
# NEXTN_RECORD_BEFORE ("--pdl on --prefill chunked": the bench decode
# flags of the *_old runs, i.e. what a change is compared against; empty:
# no *_old runs), NEXTN_RECORD_BF16 ("27b": presets also decoded from bf16
# weights, generated in host memory by --preset, no file; empty: none),
# NEXTN_RECORD_PREFILL (2048: the decode steps also time a prefill of this
# many tokens; empty: none, a shorter call),
# NEXTN_BENCH_BUDGET seconds (420; steps that would start past it are
# skipped and say so), NEXTN_CK_DIR (/tmp/nextn-ck), NEXTN_SEED (0),
# NEXTN_RECORD_MTP_BEFORE (1; 0 skips the K = 4 round with the "before"
# flags, when they do not touch decoding),
# NEXTN_RECORD_DRAFT_VOCAB (unset; e.g. 32768: also the K = 4 round with
# --draft-vocab N, docs/speculative.md section 10).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_BENCH_BUDGET:-420}
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
SEED=${NEXTN_SEED:-0}
BEFORE=${NEXTN_RECORD_BEFORE-"--pdl on --prefill chunked"}
PREFILL=${NEXTN_RECORD_PREFILL-2048}
START=$(date +%s)
export_cuda_libs
N=$BUILD/nextn
mkdir -p "$CK"
record_start
mkdir -p "$OUT/json"
say "cuBLAS from $CUBLAS_DIR; before = $BEFORE"

for size in ${NEXTN_RECORD_SIZES:-0.8b 4b 27b}; do
  dir=$CK/$size-q4
  n=256
  [ "$size" = 27b ] && n=128
  run_step "make_$size" 120 "$N" make-checkpoint --preset "qwen3.5-$size" --quant q4 --seed "$SEED" --out "$dir"
  common=(bench decode --backend cuda -m "$dir" --prompt-len 16 -n "$n" --repeats 3)
  prefill=()
  [ -n "$PREFILL" ] && prefill=(--prefill-len "$PREFILL")
  json_step "decode_${size}_new" 200 "$N" "${common[@]}" "${prefill[@]}" --breakdown
  [ -n "$BEFORE" ] && run_step "decode_${size}_old" 200 "$N" "${common[@]}" "${prefill[@]}" $BEFORE
  json_step "mtp4_${size}_new" 200 "$N" "${common[@]}" --draft mtp --block-size 4 --breakdown
  if [ -n "${NEXTN_RECORD_DRAFT_VOCAB:-}" ]; then
    run_step "mtp4dv_${size}_new" 200 "$N" "${common[@]}" --draft mtp --block-size 4 \
      --draft-vocab "$NEXTN_RECORD_DRAFT_VOCAB"
  fi
  json_step "mtp8_${size}_new" 200 "$N" "${common[@]}" --draft mtp --block-size 8
  [ -n "$BEFORE" ] && [ "${NEXTN_RECORD_MTP_BEFORE:-1}" = 1 ] &&
    run_step "mtp4_${size}_old" 200 "$N" "${common[@]}" --draft mtp --block-size 4 $BEFORE
  rm -rf "$dir"
done

for size in ${NEXTN_RECORD_BF16-27b}; do
  json_step "decode_${size}-bf16_new" 240 "$N" bench decode --backend cuda --preset "qwen3.5-$size" --quant bf16 \
    --prompt-len 16 -n 64 --repeats 3 --breakdown
done

python3 scripts/decode_record_json.py "$OUT/json" --commit "$(head -1 "$BUILD/COMMIT")" \
  --sizes "${NEXTN_RECORD_SIZES:-0.8b 4b 27b}" --quant q4 --bf16-sizes "${NEXTN_RECORD_BF16-27b}" \
  --json "$OUT/decode-record.json" | tee -a "$SUMMARY"
# one archive: a call brings back at most 8 files a folder, and json/ holds 9
tar czf "$OUT/json.tar.gz" -C "$OUT" json && rm -rf "$OUT/json"
say "elapsed: $(( $(date +%s) - START )) s"
record_finish
