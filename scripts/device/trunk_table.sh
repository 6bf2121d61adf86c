#!/usr/bin/env bash
# Issue 24's kernel table, one device call: `nextn bench trunk` (every trunk
# matrix of the 0.8B, 4B and 27B presets at 1..32 rows, q4 g64, the copy
# bandwidth measured beside each) as JSON, rendered as markdown by
# scripts/trunk_table.py, with the machine record.
#
#   scripts/device/prepare.sh     # here: builds build-cuda/, packs build-cuda.tar.xz
#   device run, carry build-cuda.tar.xz: bash scripts/device/trunk_table.sh
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_TRUNK_ARGS (extra flags, e.g. --repeats 60).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
record_start
t0=$(date +%s)
# shellcheck disable=SC2086
timeout 240 "$BUILD/nextn" bench trunk --json ${NEXTN_TRUNK_ARGS:-} >"$OUT/trunk.json" 2>"$LOG/trunk_json.err"
say "bench trunk --json: exit $? in $(( $(date +%s) - t0 )) s; $(head -c 300 "$LOG/trunk_json.err")"
python3 scripts/trunk_table.py "$OUT/trunk.json" >"$OUT/trunk.md" 2>>"$LOG/trunk_json.err"
say "trunk.md: $(wc -l <"$OUT/trunk.md") lines"
record_finish
