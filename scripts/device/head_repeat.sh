#!/usr/bin/env bash
# Repeats the LM-head projection bench (q4 g64, with and without the fused
# argmax) ROUNDS times for each carried binary, one summary line per run:
# the spread of the same binary across rounds, and between binaries (A/B of
# a kernel variant: build it elsewhere and carry it as build-cuda/nextn-<name>).
#   bash scripts/device/head_repeat.sh [BIN...]     # default: nextn
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="$PWD/build-cuda/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
echo "commit: $(head -1 build-cuda/COMMIT 2>/dev/null)"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for bin in "${@:-nextn}"; do
    for a in --argmax ""; do
      echo -n "$bin $a: "
      build-cuda/$bin bench projection --shape 248320x5120 --quant q4 --group-size 64 --widths ${WIDTHS:-1,4,8,16,32} $a 2>&1 |
        grep -E "^ +[0-9]+ " | awk '{printf "W=%s %s %s  ", $1, $2, $6} END {print ""}'
    done
  done
done
