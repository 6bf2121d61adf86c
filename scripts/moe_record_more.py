#!/usr/bin/env python3
"""The second MoE record's rows (issue 25) from scripts/device/moe_record.sh's
logs, one directory per device call named by the binary's commit
(docs/benchmark_results/moe-h200-2026-12-04-b-raw.tar.gz unpacked):

  python3 scripts/moe_record_more.py DIR [--json OUT.json]

Whatever each call's logs hold of:
  - Qwen3.5-122B-A10B q4 from host memory (bench decode --preset --json):
    greedy decode (median/min/max, share of the active-bytes roofline, peak
    memory over the budget) and the MTP round at K = 3 (random MTP head,
    never accepted: a round is drafting + verifying 3 rows) over a step;
  - the 35B-A3B greedy decode (bench decode --json) and, where the call ran
    Nsight Compute, the routing kernels' mean durations;
  - the verify arms at the 35B-A3B shape (bench verify --json): tokens/s per
    K and arm, each arm over batched;
  - Gemma 4 26B-A4B q4 (generate --json, 256 tokens, one run each): greedy,
    the oracle at 0.9/0.8/0.7 with no draft cost, the real assistant's round
    (its draft and verify milliseconds), and what the oracle's tokens per
    round give at the assistant's measured round cost.
Prints markdown tables; --json writes the rows."""
import json
import os
import sys


def load(path):
    with open(path) as f:
        t = f.read()
    return json.loads(t[t.index("{"):])


def summary(d):
    return {"median": round(d["median"], 1), "min": round(d["min"], 1), "max": round(d["max"], 1), "repeats": d["n"]}


def rows_122b(d, commit):
    p = os.path.join(d, "decode_122b-a10b.txt")
    if not os.path.exists(p):
        return []
    dec = load(p)
    r = dec["roofline"]
    row = {"shape": "qwen3.5-122b-a10b", "quant": "q4", "commit": commit, "source": dec["model"],
           "decode_tok_s": summary(dec["decode_tokens_per_second"]),
           "roofline_tok_s": round(r["roofline_tokens_per_second"], 1),
           "roofline_share": round(r["fraction_of_roofline"], 4),
           "active_bytes_per_token": r["bytes_per_token"], "device_weight_bytes": r["device_weight_bytes"],
           "peak_over_budget": round(r["peak_over_budget"], 3), "started": dec["machine"]["started"]}
    m = os.path.join(d, "mtp3_122b-a10b.txt")
    if os.path.exists(m):
        mtp = load(m)
        step = dec["decode_ms_per_token"]["median"]
        row["k3_round_over_step"] = round(mtp["decode_ms_per_round"]["median"] / step, 3)
    return [row]


def rows_35b(d, commit):
    """The 35B-A3B greedy decode of a call, and its routing kernels' mean
    durations under Nsight Compute where the call took them."""
    p = os.path.join(d, "decode_35b-a3b.txt")
    if not os.path.exists(p):
        return []
    dec = load(p)
    row = {"shape": "qwen3.5-35b-a3b", "quant": "q4", "commit": commit,
           "decode_tok_s": summary(dec["decode_tokens_per_second"]),
           "roofline_share": round(dec["roofline"]["fraction_of_roofline"], 4)}
    n = os.path.join(d, "ncu_35b-a3b.txt")
    if os.path.exists(n):
        for line in open(n):
            for k in ("moe_route_plan_kernel", "moe_combine_kernel", "moe_matmul_kernel"):
                if k in line:
                    row[k + "_mean_us"] = float(line.split()[-2])
    return [row]


def rows_verify(d, commit):
    p = os.path.join(d, "verify_35b-a3b.txt")
    if not os.path.exists(p):
        return []
    v = load(p)
    by_k = {}
    for a in v["arms"]:
        by_k.setdefault(a["block_size"], {})[a["verify"]] = a
    out = []
    for k, arms in sorted(by_k.items()):
        base = arms["batched"]["tokens_per_second"]["median"]
        for name, a in arms.items():
            out.append({"shape": "qwen3.5-35b-a3b", "quant": "q4", "commit": commit, "block_size": k, "verify": name,
                        "accept_rate": v["settings"]["accept_rate"], "draft_cost": v["settings"]["draft_cost"],
                        "tok_s": summary(a["tokens_per_second"]), "over_batched": round(a["tokens_per_second"]["median"] / base, 4),
                        "round_ms": round(a["round_ms"]["median"], 3), "tokens_match": a["tokens_match"],
                        "identity_violations": len(a["identity_violations"])})
    return out


def rows_gemma(d, commit):
    g = os.path.join(d, "greedy_gemma4-26b-a4b.txt")
    if not os.path.exists(g):
        return []
    greedy = load(g)["stats"]
    step = greedy["round_ms"]
    row = {"shape": "gemma4-26b-a4b", "quant": "q4", "commit": commit,
           "greedy_tok_s": round(greedy["tokens_per_second"], 1), "step_ms": round(step, 3)}
    for k in (3, 4):
        o = os.path.join(d, f"oracle{k}_gemma4-26b-a4b.txt")
        a = os.path.join(d, f"assistant{k}_gemma4-26b-a4b.txt")
        if not (os.path.exists(o) and os.path.exists(a)):
            continue
        orc, ast = load(o)["stats"], load(a)["stats"]
        row[f"k{k}_oracle_free_tok_s"] = round(orc["tokens_per_second"], 1)
        row[f"k{k}_oracle_free_over_greedy"] = round(orc["tokens_per_second"] / greedy["tokens_per_second"], 3)
        row[f"k{k}_oracle_tokens_per_round"] = round(orc["tokens_per_round"], 3)
        row[f"k{k}_assistant_round_ms"] = round(ast["round_ms"], 3)
        row[f"k{k}_assistant_draft_ms"] = round(ast["draft_ms"], 3)
        row[f"k{k}_assistant_verify_ms"] = round(ast["verify_ms"], 3)
        # The oracle's tokens per round at the assistant's round cost.
        at_cost = orc["tokens_per_round"] / ast["round_ms"] * 1000.0
        row[f"k{k}_oracle_at_assistant_cost_tok_s"] = round(at_cost, 1)
        row[f"k{k}_oracle_at_assistant_cost_over_greedy"] = round(at_cost / greedy["tokens_per_second"], 3)
    return [row]


def spread(t, repeats=True):
    """"median [min, max] (repeats)" of a summary()."""
    return f"{t['median']} [{t['min']}, {t['max']}]" + (f" ({t['repeats']})" if repeats else "")


def table(header, rows):
    """A markdown table and a blank line after it."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    print()


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: moe_record_more.py DIR [--json OUT.json]")
    root = sys.argv[1]
    rows = {"qwen122b": [], "qwen35b": [], "verify": [], "gemma": []}
    for c in sorted(os.listdir(root)):
        d = os.path.join(root, c)
        if not os.path.isdir(d):
            continue
        rows["qwen122b"] += rows_122b(d, c)
        rows["qwen35b"] += rows_35b(d, c)
        rows["verify"] += rows_verify(d, c)
        rows["gemma"] += rows_gemma(d, c)
    table(["shape", "commit", "decode tok/s median [min, max] (repeats)", "roofline tok/s", "share",
           "peak / budget", "K=3 round / step"],
          [[f"{r['shape']} q4 (host memory)", r["commit"], spread(r["decode_tok_s"]), r["roofline_tok_s"],
            f"{r['roofline_share']:.1%}", r["peak_over_budget"], r.get("k3_round_over_step", "-")]
           for r in rows["qwen122b"]])
    table(["shape", "commit", "decode tok/s median [min, max] (repeats)", "share", "route_plan us", "combine us"],
          [[f"{r['shape']} q4", r["commit"], spread(r["decode_tok_s"]), f"{r['roofline_share']:.1%}",
            r.get("moe_route_plan_kernel_mean_us", "-"), r.get("moe_combine_kernel_mean_us", "-")]
           for r in rows["qwen35b"]])
    table(["K", "arm", "tok/s median [min, max]", "over batched", "round ms", "tokens match"],
          [[r["block_size"], r["verify"], spread(r["tok_s"], repeats=False), f"{r['over_batched']:.3f}", r["round_ms"],
            r["tokens_match"]] for r in rows["verify"]])
    for r in rows["gemma"]:
        print(f"gemma4-26b-a4b q4 ({r['commit']}): greedy {r['greedy_tok_s']} tok/s ({r['step_ms']} ms/step)")
        for k in (3, 4):
            if f"k{k}_oracle_free_tok_s" not in r:
                continue
            print(f"  K={k}: oracle, no draft cost {r[f'k{k}_oracle_free_tok_s']} tok/s "
                  f"({r[f'k{k}_oracle_free_over_greedy']}x; {r[f'k{k}_oracle_tokens_per_round']} tokens/round); "
                  f"assistant round {r[f'k{k}_assistant_round_ms']} ms (draft {r[f'k{k}_assistant_draft_ms']}, "
                  f"verify {r[f'k{k}_assistant_verify_ms']}); oracle at that cost "
                  f"{r[f'k{k}_oracle_at_assistant_cost_tok_s']} tok/s ({r[f'k{k}_oracle_at_assistant_cost_over_greedy']}x)")
    if "--json" in sys.argv:
        out = sys.argv[sys.argv.index("--json") + 1]
        doc = {"record": "moe-h200-b", "targets": {"qwen122b_runs_on_one_h200": True, "gemma_assistant_over_greedy": 1.5},
               "rows": rows}
        with open(out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
