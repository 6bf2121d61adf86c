#!/usr/bin/env python3
"""Compares two binaries' `nextn bench decode --json` runs taken in one device
call (A, B, A, B per preset and block size): per preset and block size K,
each run's median decode tokens/s and roofline share (K = 1) or median ms
per speculative round (K > 1), the median over each side's runs, and B / A.
Prints markdown; --json OUT writes the rows the decode record's JSON holds.

    python3 scripts/decode_ab.py --a 'decode_*_base_*.json' --b 'decode_*_new_*.json' \
        --commit-a 0123abc --commit-b 4567def [--json ab.json]
"""
import argparse
import glob
import json
import statistics
import sys


def load(pattern):
    runs = {}  # (preset, quant, K) -> [(tok/s median, min, max, roofline share, repeats, ms per round)]
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
        k = j["settings"].get("block_size", 1) if j["settings"]["draft"] != "none" else 1
        share = j.get("roofline", {}).get("fraction_of_roofline", float("nan"))  # none where the bandwidth is unknown
        rounds = j["decode_ms_per_round"]["median"] if k > 1 else float("nan")
        runs.setdefault((preset, quant, k), []).append((d["median"], d["min"], d["max"], share, d["n"], rounds))
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
    print("| shape | quant | K | A tok/s: median of runs [runs' medians] | B tok/s | B / A | roofline share A -> B "
          "| ms per round A -> B |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for key in a:
        if key not in b:
            continue
        med = lambda runs, i: statistics.median(r[i] for r in runs)
        ma, mb = med(a[key], 0), med(b[key], 0)
        ra, rb = med(a[key], 3), med(b[key], 3)
        qa, qb = med(a[key], 5), med(b[key], 5)
        fmt = lambda runs: ", ".join(f"{r[0]:.1f}" for r in runs)
        share = f"{ra:.3f} -> {rb:.3f}" if key[2] == 1 else ""
        rounds = f"{qa:.3f} -> {qb:.3f}" if key[2] > 1 else ""
        print(f"| {key[0]} | {key[1]} | {key[2]} | {ma:.1f} [{fmt(a[key])}] | {mb:.1f} [{fmt(b[key])}] | "
              f"{mb / ma:.3f} | {share} | {rounds} |")
        for side, commit, runs, m, sh, q in (("a", args.commit_a, a[key], ma, ra, qa),
                                              ("b", args.commit_b, b[key], mb, rb, qb)):
            row = {"shape": key[0], "quant": key[1], "block_size": key[2], "side": side, "commit": commit,
                   "decode_tok_s": round(m, 1),
                   "runs": [{"median": round(r[0], 2), "min": round(r[1], 2), "max": round(r[2], 2),
                             "repeats": r[4]} for r in runs]}
            if key[2] == 1:
                row["roofline_share"] = round(sh, 4) if sh == sh else None  # NaN: unknown (JSON null)
            else:
                row["ms_per_round"] = round(q, 4)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
