#!/bin/bash
# The device-machine half of the nextn-code-15m run (docs/benchmark_results/train-nextn-code-h200-2026-11-30.md).
# Staged beside this script, in a folder carried to the machine:
#   train/train_nextn_code.py   (scripts/train/)
#   fixtures/qwen35_ref.py      (scripts/fixtures/)
#   data/{train.u16,heldout.u16,tokenizer.json,tokenizer_config.json}  (prepare_corpus.py --out data)
#   go.sh                       (this file)
# Writes under $OUT: train.log and run.tar split into 15 MB parts (run/model = the checkpoint,
# run/train_curve.csv, run/result.json).  Train seconds: SECONDS_TRAIN (default 370).
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'
PYTHONUNBUFFERED=1 python3 train/train_nextn_code.py --data data --out "$OUT/run" --size full --seconds "${SECONDS_TRAIN:-370}" 2>&1 | grep -v -i "falling back" | tee "$OUT/train.log"
cd "$OUT" && tar cf run.tar run && split -b 15M run.tar run.tar.part- && rm -rf run run.tar
ls -la "$OUT"
