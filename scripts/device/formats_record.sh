#!/usr/bin/env bash
# Issue 26's record, one device call per shape list: the Qwen3.5 4B and 27B
# shapes as random checkpoints (`nextn make-checkpoint`, written to this
# machine's disk and deleted after use, never committed) in MLX q4, FP8
# (quant_method fp8, 128x128 blocks) and GPTQ int4 (group 128), each timed by
# `nextn bench decode --json`: greedy decode tok/s and its share of the
# roofline, and an MTP round at K = 4 against the greedy step (the decode
# record's "K = 4 round / step").
#
#   scripts/device/prepare.sh     # here: builds build-cuda/, packs build-cuda.tar.xz
#   device run, carry build-cuda.tar.xz (two calls keep each under ~8 min):
#     bash scripts/device/formats_record.sh 4b
#     bash scripts/device/formats_record.sh 27b
#   here: python3 scripts/formats_table.py formats-4b.json formats-27b.json > table.md
#
# Arguments: shapes (4b, 27b, 0.8b; default "4b 27b"). Writes $OUT/formats.json
# (a list of rows {shape, quant, decode_tok_s, roofline_share,
# k4_round_over_step, commit, ...}; scripts/device/formats_rows.py),
# $OUT/formats.md, $OUT/summary.txt and the raw output (each step's
# make-checkpoint line or bench JSON) in $OUT/logs.tar.gz. Environment: NEXTN_BUILD (build-cuda),
# NEXTN_FORMATS_QUANTS ("q4 fp8 gptq4"; fp8-w8a8: the fp8 checkpoint timed
# with --fp8-matmul w8a8, written once when it follows fp8), NEXTN_BENCH_BUDGET seconds (450;
# steps that would start past it are skipped and say so), NEXTN_CK_DIR
# (/tmp/nextn-ck), NEXTN_SEED (0).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
BUDGET=${NEXTN_BENCH_BUDGET:-450}
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
SEED=${NEXTN_SEED:-0}
QUANTS=${NEXTN_FORMATS_QUANTS:-q4 fp8 gptq4}
SHAPES=${*:-4b 27b}
START=$(date +%s)
export_cuda_libs
N=$BUILD/nextn
mkdir -p "$CK"
record_start
say "shapes: $SHAPES; quants: $QUANTS; disk: $(df -h "$CK" | tail -1)"

for size in $SHAPES; do
  n=256
  [ "$size" = 27b ] && n=128
  for quant in $QUANTS; do
    ck_quant=${quant%-w8a8}
    mode=()
    [ "$quant" != "$ck_quant" ] && mode=(--fp8-matmul w8a8)
    dir=$CK/$size-$ck_quant
    if [ ! -d "$dir" ]; then
      rm -rf "$CK"/*  # the disk holds one checkpoint at a time (27B fp8: ~30 GB)
      run_step "make_${size}_$quant" 240 "$N" make-checkpoint --preset "qwen3.5-$size" --quant "$ck_quant" \
        --seed "$SEED" --out "$dir"
    fi
    common=(bench decode --backend cuda -m "$dir" --prompt-len 16 -n "$n" --repeats 3 --json "${mode[@]}")
    run_step "decode_${size}_$quant" 200 "$N" "${common[@]}"
    run_step "mtp4_${size}_$quant" 200 "$N" "${common[@]}" --draft mtp --block-size 4
  done
  rm -rf "$CK"/*
done

python3 scripts/device/formats_rows.py "$LOG" "$BUILD/COMMIT" $SHAPES -- $QUANTS >"$OUT/formats.json" 2>>"$SUMMARY"
python3 scripts/formats_table.py "$OUT/formats.json" >"$OUT/formats.md" 2>>"$SUMMARY" && cat "$OUT/formats.md" >>"$SUMMARY"
say "elapsed: $(( $(date +%s) - START )) s"
record_finish
