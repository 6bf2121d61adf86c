#!/usr/bin/env python3
"""Compares two binaries' `nextn bench decode --json` runs taken in one device
call (A, B, A, B per preset): per preset, each run's median decode tokens/s
and roofline share, the median over each side's runs, and B / A. Prints
markdown; --json OUT writes the rows the decode record's JSON holds.

    python3 scripts/decode_ab.py --a 'decode_*_base_*.json' --b 'decode_*_new_*.json' \
        --commit-a 0123abc --commit-b 4567def [--json ab.json]
"""
import argparse
import glob
import json
import statistics
import sys


def load(pattern):
    runs = {}  # preset -> [(tok/s median, min, max, roofline share, quant)]
    for f in sorted(glob.glob(pattern)):
        try:
            j = json.load(open(f))
        except ValueError:  # a run that failed or timed out left no object: said, and left out
            print(f"skipped {f}: not a bench decode JSON object", file=sys.stderr)
            continue
        model = j["model"]  # "preset qwen3.5-27b (q4, seed 0, in memory)"
        preset = model.split()[1]
        quant = model.split("(")[1].split(",")[0]
        d = j["decode_tokens_per_second"]
        runs.setdefault((preset, quant), []).append(
            (d["median"], d["min"], d["max"], j["roofline"]["fraction_of_roofline"], d["n"]))
    if not runs:
        raise ValueError(f"no bench decode JSON object in {pattern}")
    return runs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="glob of the baseline's JSON files")
    ap.add_argument("--b", required=True, help="glob of the candidate's JSON files")
    ap.add_argument("--commit-a", required=True)
    ap.add_argument("--commit-b", required=True)
    ap.add_argument("--json", help="write the comparison here")
    args = ap.parse_args()
    try:
        a, b = load(args.a), load(args.b)
    except (OSError, ValueError, KeyError, IndexError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows = []
    print("| shape | quant | A tok/s: median of runs [runs' medians] | B tok/s | B / A | roofline share A -> B |")
    print("|---|---|---:|---:|---:|---:|")
    for key in a:
        if key not in b:
            continue
        ma = statistics.median(r[0] for r in a[key])
        mb = statistics.median(r[0] for r in b[key])
        ra = statistics.median(r[3] for r in a[key])
        rb = statistics.median(r[3] for r in b[key])
        fmt = lambda runs: ", ".join(f"{r[0]:.1f}" for r in runs)
        print(f"| {key[0]} | {key[1]} | {ma:.1f} [{fmt(a[key])}] | {mb:.1f} [{fmt(b[key])}] | {mb / ma:.3f} | "
              f"{ra:.3f} -> {rb:.3f} |")
        for side, commit, runs, med, share in (("a", args.commit_a, a[key], ma, ra), ("b", args.commit_b, b[key], mb, rb)):
            rows.append({"shape": key[0], "quant": key[1], "side": side, "commit": commit,
                         "decode_tok_s": round(med, 1), "roofline_share": round(share, 4),
                         "runs": [{"median": round(r[0], 2), "min": round(r[1], 2), "max": round(r[2], 2),
                                   "repeats": r[4]} for r in runs]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
