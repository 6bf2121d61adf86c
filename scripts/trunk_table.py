#!/usr/bin/env python3
"""Renders `nextn bench trunk --json` as the markdown tables of a decode
record: per preset, each trunk matrix's median microseconds per call and its
share of the copy bandwidth at each row count, the 16-row/1-row ratio, and
the step's matmuls (each matrix times its calls per token).

    python3 scripts/trunk_table.py trunk.json > trunk.md
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print("error: usage: trunk_table.py TRUNK_JSON", file=sys.stderr)
        return 1
    try:
        with open(sys.argv[1]) as f:
            j = json.load(f)
        rows = j["rows"]
        m = j["machine"]
        print(f"`nextn bench trunk` ({j['quant']} g{j['group_size']}, {j['repeats']} timed calls per cell) "
              f"on {j['device']}, commit {m.get('commit', '?')}; copy bandwidth {j['copy_gbs_min']:.0f}-"
              f"{j['copy_gbs_max']:.0f} GB/s; batch invariant: {j['batch_invariant']}.\n")
        for p in j["presets"]:
            print(f"### {p['preset']}\n")
            head = "| matrix | rows x cols | MB | per token |" + "".join(f" R={r} us (%copy) |" for r in rows)
            print(head + " t(16)/t(1) |")
            print("|---|---|---:|---:|" + "---:|" * (len(rows) + 1))
            for mx in p["matrices"]:
                t = {x["R"]: x for x in mx["timings"]}
                cells = "".join(f" {t[r]['us']:.1f} ({100 * t[r]['copy_share']:.0f}%) |" for r in rows)
                ratio = f"{t[16]['over_one_row']:.2f}" if 16 in t else "-"
                print(f"| {mx['name']} | {mx['rows']}x{mx['cols']} | {mx['weight_mb']:.1f} | {mx['per_token']} |{cells} {ratio} |")
            s = {x["R"]: x for x in p["step"]}
            cells = "".join(f" {s[r]['us']:.0f} ({100 * s[r]['copy_share']:.0f}%) |" for r in rows)
            ratio = f"{s[16]['over_one_row']:.2f}" if 16 in s else "-"
            print(f"| step matmuls | | {p['step_weight_mb']:.0f} | |{cells} {ratio} |\n")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {sys.argv[1]}: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
