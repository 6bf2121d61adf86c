#!/usr/bin/env python3
"""The MoE record's tables and JSON summary (issue 25) from the logs of
scripts/device/moe_record.sh, one directory per device call named by the
binary's commit (docs/benchmark_results/moe-h200-<date>-raw.tar.gz unpacked):

  python3 scripts/moe_record_table.py DIR [--json OUT.json]

Per call: greedy decode (bench decode --json: median/min/max over the
repeats, share of the active-bytes roofline, kernels per token), MTP rounds
at K = 2, 3, 4 against a greedy step (bench decode --draft mtp: the random
MTP head is never accepted, so a round is the cost of drafting and
verifying K rows), and the oracle at per-position acceptance 0.9/0.8/0.7 at
the MTP head's cost against plain greedy (generate --json, 256 tokens, one
run each). A call whose logs lack some of these (a shorter call) gives no
table row; every call whose breakdowns carry the routed-expert bytes the
kernels counted (bench decode --breakdown, from 035b328 on) gives a row of
expert bytes per greedy token and per MTP round."""
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def call_rows(d):
    commit = os.path.basename(d.rstrip("/"))
    dec = load(os.path.join(d, "decode_35b-a3b.txt"))
    tps = dec["decode_tokens_per_second"]
    step = dec["decode_ms_per_token"]["median"]
    row = {
        "shape": "qwen3.5-35b-a3b",
        "quant": "q4",
        "commit": dec["machine"]["commit"][:7],
        "decode_tok_s": round(tps["median"], 1),
        "decode_tok_s_min": round(tps["min"], 1),
        "decode_tok_s_max": round(tps["max"], 1),
        "repeats": tps["n"],
        "roofline_tok_s": round(dec["roofline"]["roofline_tokens_per_second"], 1),
        "roofline_share": round(dec["roofline"]["fraction_of_roofline"], 4),
        "active_bytes_per_token": dec["roofline"]["bytes_per_token"],
        "copy_gbs": round(dec["roofline"]["copy_gbs"], 1),
        "peak_over_budget": round(dec["roofline"]["peak_over_budget"], 3),
        "kernels_per_token": dec["breakdown"]["parts"][0]["kernels"],
        "gpu": dec["machine"]["gpu"],
        "started": dec["machine"]["started"],
        "load_before": dec["machine"]["load_before"],
    }
    assert row["commit"] == commit[:7], (row["commit"], commit)
    for K in (2, 3, 4):
        m = load(os.path.join(d, f"mtp{K}_35b-a3b.txt"))
        row[f"k{K}_round_over_step"] = round(m["decode_ms_per_round"]["median"] / step, 3)
    greedy = load(os.path.join(d, "greedy_35b-a3b.txt"))["stats"]
    row["generate_greedy_tok_s"] = round(greedy["tokens_per_second"], 1)
    for K in (3, 4):
        o = load(os.path.join(d, f"oracle{K}_35b-a3b.txt"))["stats"]
        row[f"oracle_k{K}_tok_s"] = round(o["tokens_per_second"], 1)
        row[f"oracle_k{K}_over_greedy"] = round(o["tokens_per_second"] / greedy["tokens_per_second"], 3)
        row[f"oracle_k{K}_tokens_per_round"] = round(o["tokens_per_round"], 3)
    return row


def complete(d):
    names = ["decode", "mtp2", "mtp3", "mtp4", "greedy", "oracle3", "oracle4"]
    return all(os.path.exists(os.path.join(d, n + "_35b-a3b.txt")) for n in names)


def expert_bytes_row(d):
    dec = load(os.path.join(d, "decode_35b-a3b.txt"))
    token = dec["breakdown"]["parts"][0].get("expert_bytes")
    if token is None:
        return None
    row = {"commit": dec["machine"]["commit"][:7], "started": dec["machine"]["started"],
           "expert_bytes_per_token": round(token)}
    for K in (2, 3, 4):
        path = os.path.join(d, f"mtp{K}_35b-a3b.txt")
        try:
            m = load(path)
        except (OSError, ValueError):  # absent, or cut short by the call's budget
            continue
        row[f"expert_bytes_per_k{K}_round"] = round(m["breakdown"]["parts"][0]["expert_bytes"])
    return row


def main():
    root = sys.argv[1]
    dirs = [os.path.join(root, c) for c in os.listdir(root) if os.path.isdir(os.path.join(root, c))]
    rows = [call_rows(d) for d in dirs if complete(d)]
    rows.sort(key=lambda r: r["started"])
    bytes_rows = sorted(filter(None, (expert_bytes_row(d) for d in dirs)), key=lambda r: r["started"])
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump({"record": "moe-h200", "targets": {"decode_roofline_share": 0.5, "oracle_over_greedy": 1.6},
                       "rows": rows, "expert_bytes": bytes_rows}, f, indent=1)
            f.write("\n")
    print("| commit | decode tok/s (median, min-max, n) | share of active-bytes roofline | kernels/token | K=2 / 3 / 4 round over step | oracle K=3 / K=4 over greedy |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['commit']} | {r['decode_tok_s']} ({r['decode_tok_s_min']}-{r['decode_tok_s_max']}, {r['repeats']}) | "
              f"{r['roofline_share']:.1%} of {r['roofline_tok_s']} | {r['kernels_per_token']:.0f} | "
              f"{r['k2_round_over_step']} / {r['k3_round_over_step']} / {r['k4_round_over_step']} | "
              f"{r['oracle_k3_over_greedy']} / {r['oracle_k4_over_greedy']} "
              f"({r['oracle_k3_tok_s']} / {r['oracle_k4_tok_s']} against {r['generate_greedy_tok_s']}) |")
    if bytes_rows:
        print()
        print("| commit | expert MB per greedy token | per K=2 round | per K=3 round | per K=4 round |")
        print("|---|---:|---:|---:|---:|")
        for r in bytes_rows:
            cells = [f"{r[k] / 1e6:.1f} ({r[k] / r['expert_bytes_per_token']:.2f}x)" if k in r else "not run"
                     for k in ("expert_bytes_per_k2_round", "expert_bytes_per_k3_round", "expert_bytes_per_k4_round")]
            print(f"| {r['commit']} | {r['expert_bytes_per_token'] / 1e6:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
