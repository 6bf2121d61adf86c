#!/usr/bin/env python3
"""Compares two binaries' `nextn bench trunk --json` runs taken in one device
call (A, B, A, B, ...): per preset and matrix, the best median of each side
at every row count, B / A, and the step's matmuls (each matrix times its
calls per token). Prints markdown; --json OUT also writes the comparison.

    python3 scripts/trunk_ab.py --a 'trunk-main-*.json' --b 'trunk-exp-*.json' [--json ab.json]
"""
import argparse
import glob
import json
import sys


def load(pattern):
    runs = [json.load(open(f)) for f in sorted(glob.glob(pattern))]
    if not runs:
        raise ValueError(f"no file matches {pattern}")
    best = {}  # (preset, matrix, R) -> (us, per_token)
    for j in runs:
        for p in j["presets"]:
            for m in p["matrices"]:
                for t in m["timings"]:
                    key = (p["preset"], m["name"], t["R"])
                    us = t["us"]
                    if key not in best or us < best[key][0]:
                        best[key] = (us, m["per_token"])
    return best, len(runs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="glob of the baseline's JSON files")
    ap.add_argument("--b", required=True, help="glob of the candidate's JSON files")
    ap.add_argument("--json", help="write the comparison here")
    args = ap.parse_args()
    try:
        a, na = load(args.a)
        b, nb = load(args.b)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    keys = [k for k in a if k in b]
    rows = sorted({k[2] for k in keys})
    out = {"runs_a": na, "runs_b": nb, "rows": rows, "presets": []}
    print(f"Best median of {na} run(s) of A and {nb} of B per cell; us per call, A -> B.\n")
    for preset in dict.fromkeys(k[0] for k in keys):
        print(f"### {preset}\n")
        print("| matrix |" + "".join(f" R={r} |" for r in rows))
        print("|---|" + "---|" * len(rows))
        step = {"a": {r: 0.0 for r in rows}, "b": {r: 0.0 for r in rows}}
        mats = []
        for name in dict.fromkeys(k[1] for k in keys if k[0] == preset):
            cells = []
            for r in rows:
                ua, pt = a[(preset, name, r)]
                ub, _ = b[(preset, name, r)]
                step["a"][r] += ua * pt
                step["b"][r] += ub * pt
                cells.append({"R": r, "us_a": round(ua, 2), "us_b": round(ub, 2), "b_over_a": round(ub / ua, 3)})
            mats.append({"matrix": name, "cells": cells})
            print(f"| {name} |" + "".join(f" {c['us_a']:.1f} -> {c['us_b']:.1f} ({c['b_over_a']:.2f}) |" for c in cells))
        print("| step matmuls |" +
              "".join(f" {step['a'][r]:.0f} -> {step['b'][r]:.0f} ({step['b'][r] / step['a'][r]:.3f}) |" for r in rows))
        print()
        out["presets"].append({"preset": preset, "matrices": mats,
                               "step_matmuls_us": [{"R": r, "a": round(step["a"][r], 1), "b": round(step["b"][r], 1),
                                                    "b_over_a": round(step["b"][r] / step["a"][r], 3)} for r in rows]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
