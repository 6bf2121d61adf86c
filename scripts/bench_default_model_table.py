#!/usr/bin/env python3
"""Markdown table from scripts/bench_default_model.sh output (JSON lines):
decode tokens/s median [min, max] per backend x prompt x configuration, the
acceptance (accepted / drafted) and the per-position acceptance (share of
rounds accepting draft i), and a check that
every MTP run printed the greedy run's tokens."""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
tokens = {}
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        j = json.loads(line)
        key = (j["backend"], j["prompt"], j["config"])
        runs[key].append(j["result"])
        tokens.setdefault((j["backend"], j["prompt"]), {}).setdefault(j["config"], set()).add(tuple(j["result"]["tokens"]))

print("| backend | prompt | config | runs | decode tok/s median [min, max] | vs greedy | acceptance | tokens/round | accepted at draft 1..K-1 | same tokens as greedy |")
print("|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(runs):
    backend, prompt, config = key
    rs = runs[key]
    tps = [r["stats"]["tokens_per_second"] for r in rs]
    med = statistics.median(tps)
    base = statistics.median([r["stats"]["tokens_per_second"] for r in runs[(backend, prompt, "none")]])
    s = rs[0]["stats"]
    rounds = s["rounds"]
    per_pos = " ".join(f"{a / rounds:.2f}" for a in s["accepted_at"]) if rounds and s["accepted_at"] else "-"
    per_round = s["generated"] / rounds if rounds else 0
    acceptance = f"{s['accepted'] / s['drafted']:.3f}" if s["drafted"] else "-"
    same = tokens[(backend, prompt)].get(config) == tokens[(backend, prompt)].get("none")
    print(f"| {backend} | {prompt} | {config} | {len(rs)} | {med:.1f} [{min(tps):.1f}, {max(tps):.1f}] | {med / base:.2f}x | "
          f"{acceptance} | {per_round:.2f} | {per_pos} | {'yes' if same else 'NO'} |")
