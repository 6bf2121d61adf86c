#!/usr/bin/env python3
"""Renders formats_record.sh's rows (scripts/device/formats_rows.py: a JSON
list of {shape, quant, decode_tok_s, roofline_share, k4_round_over_step,
commit, ...}) as the issue 26 record's markdown table. Several files (one per
device call) make one table, in their order.

    python3 scripts/formats_table.py formats-4b.json formats-27b.json > table.md
"""
import json
import sys

QUANT_NAMES = {"q4": "MLX q4 g64", "fp8": "FP8 e4m3 b128", "fp8-w8a8": "FP8 e4m3 b128, W8A8", "gptq4": "GPTQ int4 g128"}


def cell(v, fmt):
    return "-" if v is None else fmt.format(v)


def main() -> int:
    if len(sys.argv) < 2:
        print("error: usage: formats_table.py ROWS_JSON...", file=sys.stderr)
        return 1
    rows = []
    for path in sys.argv[1:]:
        try:
            with open(path) as f:
                rows += json.load(f)
        except (OSError, ValueError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return 1
    try:
        commits = sorted({r["commit"] for r in rows})
        print("| shape | format | decode tok/s | % of roofline | K = 4 round / step | GB read per token | checkpoint GiB |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in rows:
            share = None if r["roofline_share"] is None else 100 * r["roofline_share"]
            gb = None if r.get("bytes_per_token") is None else r["bytes_per_token"] / 1e9
            print(f"| {r['shape']} | {QUANT_NAMES.get(r['quant'], r['quant'])} | {cell(r['decode_tok_s'], '{:.1f}')} "
                  f"| {cell(share, '{:.0f}%')} | {cell(r['k4_round_over_step'], '{:.2f}')} | {cell(gb, '{:.2f}')} "
                  f"| {cell(r.get('checkpoint_gib'), '{:.1f}')} |")
        print(f"\ncommit: {'; '.join(commits)}")
        for r in rows:
            if r.get("error"):
                print(f"- {r['shape']} {r['quant']}: {r['error']}")
    except (KeyError, TypeError) as e:
        print(f"error: {sys.argv[1:]}: malformed row: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
