#!/usr/bin/env python3
"""Markdown tables for the verify-path decision record from sweep_verify.sh outputs.

    python3 scripts/device/sweep_tables.py OUT1 [OUT2]

OUT1 (and OUT2, a second device call) are the folders sweep_verify.sh filled
(json/verify_<model>_r<rate>_<cost>.json, json/projection_<model>.json,
json/guard.json, summary.txt). Prints, per model x draft cost x acceptance:
median [min, max] decode tokens/s per K x arm with the ratio to batched, the
device counters per round (rows projected, walk rows, head MB read, logits
written), the early-exit ceiling per K and the verdict per K; then the
winners per K (the verdict column), and with OUT2 the
spread between the two calls. Standard library only.

Definitions:
  ceiling(K)   = t_proj(K) - t_proj(mean walk rows per round), the LM-head
                 projection time an ideal early exit saves per round, from
                 `bench projection` (ms, median) at the model's head shape and
                 the walk arm's runtime counters (walk_rows / rounds); shown
                 also as a share of batched's round_ms. Without a projection
                 file (CPU) the row says so.
  verdict(K)   = the arm with the highest median; it "wins" only when its min
                 is above batched's max (the spreads do not overlap); otherwise
                 "batched (no arm separates)".
"""
import glob
import json
import os
import re
import sys

ARM_ORDER = ["batched", "walk", "pad", "fused"]


def load_runs(out):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "json", "verify_*.json"))):
        m = re.match(r"verify_(.+)_r([0-9.]+)_(free|mtp)(_while)?\.json$", os.path.basename(path))
        if not m:
            continue
        variant = "while" if m.group(4) else "default"
        try:
            with open(path) as f:
                j = json.load(f)
        except (OSError, ValueError) as e:
            runs[(m.group(1), m.group(3), m.group(2), variant)] = {"error": f"{path}: {e}"}
            continue
        runs[(m.group(1), m.group(3), m.group(2), variant)] = j
    return runs


def load_projection(out, model):
    path = os.path.join(out, "json", f"projection_{model}.json")
    try:
        with open(path) as f:
            j = json.load(f)
        return {int(r["W"]): float(r["ms"]) for r in j.get("rows", [])}
    except (OSError, ValueError):
        return None


def interp(table, w):
    """Projection ms at (fractional) width w: linear between measured widths."""
    ws = sorted(table)
    if w <= ws[0]:
        return table[ws[0]]
    if w >= ws[-1]:
        return table[ws[-1]]
    for a, b in zip(ws, ws[1:]):
        if a <= w <= b:
            return table[a] + (table[b] - table[a]) * (w - a) / (b - a)
    return None


def fmt_summary(s, digits=1):
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def arms_by_k(run):
    by_k = {}
    for a in run.get("arms", []):
        by_k.setdefault(a["block_size"], {})[a["verify"]] = a
    return by_k


def verdict(arms):
    timed = {n: a for n, a in arms.items() if "tokens_per_second" in a}
    if not timed:
        return "untimed", None
    best = max(timed, key=lambda n: timed[n]["tokens_per_second"]["median"])
    base = timed.get("batched")
    if best == "batched" or base is None:
        return "batched", "batched"
    if timed[best]["tokens_per_second"]["min"] > base["tokens_per_second"]["max"]:
        r = timed[best]["tokens_per_second"]["median"] / base["tokens_per_second"]["median"]
        return f"**{best}** ({r:.3f}x, spreads separate)", best
    return f"batched (fastest median {best}, spreads overlap)", "batched"


def model_section(model, cost, rate, variant, run, proj):
    title = f"### {model}, draft cost {cost}, oracle acceptance {rate}"
    if variant == "while":
        title += ", WHILE-graph walk (--walk while)"
    lines = [title, ""]
    if "error" in run:
        return lines + [f"unreadable: {run['error']}", ""]
    if run.get("refused"):
        lines += ["REFUSED (no table):", ""] + [f"- {r}" for r in run["refused"][:10]] + [""]
        return lines
    s = run.get("settings", {})
    mach = run.get("machine", {})
    lines.append(f"`{mach.get('command', '?')}`  ")
    lines.append(f"commit `{mach.get('commit', '?')}` ({mach.get('commit_source', '?')}), "
                 f"{s.get('repeats', '?')} repeats ABBA, -n {s.get('max_new_tokens', '?')}, "
                 f"runtimes built: {run.get('runtimes_built', '?')}, "
                 f"load {mach.get('load_before', '?')} -> {mach.get('load_after', '?')}, "
                 f"gpu {mach.get('gpu_before', '-')} -> {mach.get('gpu_after', '-')}")
    lines.append("")
    lines.append("| K | arm | tokens/s median [min, max] | vs batched | round_ms | verify_ms | draft_ms | "
                 "acceptance | rows/round | walk rows/round | head MB/round | logits KB/round | path |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    by_k = arms_by_k(run)
    for k in sorted(by_k):
        base = by_k[k].get("batched")
        for name in ARM_ORDER:
            a = by_k[k].get(name)
            if a is None:
                continue
            c = a["counters"]
            rounds = max(1, c["rounds"])
            tps = a.get("tokens_per_second")
            rel = "-"
            if tps and base and "tokens_per_second" in base and base["tokens_per_second"]["median"] > 0:
                rel = f"{tps['median'] / base['tokens_per_second']['median']:.3f}x"
            lines.append(
                f"| {k} | {name} | {fmt_summary(tps) if tps else '-'} | {rel} | "
                f"{fmt_summary(a['round_ms'], 3) if 'round_ms' in a else '-'} | "
                f"{fmt_summary(a['verify_ms'], 3) if 'verify_ms' in a else '-'} | "
                f"{fmt_summary(a['draft_ms'], 3) if 'draft_ms' in a else '-'} | {a['acceptance']:.3f} | "
                f"{c['rows_projected'] / rounds:.2f} | {c.get('walk_rows', 0) / rounds:.2f} | "
                f"{c.get('head_bytes_read', 0) / rounds / 1e6:.1f} | {c.get('logits_bytes_written', 0) / rounds / 1e3:.0f} | "
                f"{'/'.join(c.get('head_paths', []))} |")
    lines.append("")
    lines.append("| K | mean walk rows (a+1) | t_proj(a+1) ms | t_proj(K) ms | ceiling ms/round | ceiling / batched round | verdict |")
    lines.append("|---|---|---|---|---|---|---|")
    winners = {}
    for k in sorted(by_k):
        arms = by_k[k]
        v, win = verdict(arms)
        winners[k] = win
        walk = arms.get("walk")
        if walk is None or proj is None:
            why = "no walk arm" if walk is None else "no projection timing (bench projection is CUDA only)"
            lines.append(f"| {k} | - | - | - | - | {why} | {v} |")
            continue
        c = walk["counters"]
        mean_rows = c["walk_rows"] / max(1, c["rounds"])
        t_a, t_k = interp(proj, mean_rows), interp(proj, k)
        ceil = t_k - t_a
        base = arms.get("batched")
        share = "-"
        if base and "round_ms" in base and base["round_ms"]["median"] > 0:
            share = f"{100 * ceil / base['round_ms']['median']:.2f}%"
        lines.append(f"| {k} | {mean_rows:.2f} | {t_a:.4f} | {t_k:.4f} | {ceil:.4f} | {share} | {v} |")
    lines.append("")
    return lines, winners


def spread(runs1, runs2):
    lines = ["## Spread between the two calls", "",
             "| model | cost | acceptance | walk | K | arm | call 1 median | call 2 median | call 2 / call 1 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(set(runs1) & set(runs2)):
        r1, r2 = runs1[key], runs2[key]
        if "error" in r1 or "error" in r2:
            continue
        b1, b2 = arms_by_k(r1), arms_by_k(r2)
        for k in sorted(set(b1) & set(b2)):
            for name in ARM_ORDER:
                a1, a2 = b1[k].get(name), b2[k].get(name)
                if not a1 or not a2 or "tokens_per_second" not in a1 or "tokens_per_second" not in a2:
                    continue
                m1, m2 = a1["tokens_per_second"]["median"], a2["tokens_per_second"]["median"]
                lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {k} | {name} | {m1:.1f} | {m2:.1f} | "
                             f"{m2 / m1 if m1 else float('nan'):.3f} |")
    return lines + [""]


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 1
    out1 = argv[1]
    runs = load_runs(out1)
    if not runs:
        print(f"error: {out1}/json holds no verify_*.json", file=sys.stderr)
        return 1
    print(f"# Verify-arm sweep tables ({out1})\n")
    guard = os.path.join(out1, "json", "guard.json")
    if os.path.exists(guard):
        with open(guard) as f:
            g = json.load(f)
        print(f"Guard: --fault {g['fault']} on {g['backend']}: exit {g['exit']}, table printed: {g['table']} "
              f"-> **{g['verdict']}**\n")
    summary = os.path.join(out1, "summary.txt")
    if os.path.exists(summary):
        skips = [l.rstrip() for l in open(summary) if l.startswith("skip")]
        if skips:
            print("Skipped by the time budget:\n")
            print("\n".join(f"- {s}" for s in skips) + "\n")
    winners = {}
    models = sorted({k[0] for k in runs})
    for model in models:
        proj = load_projection(out1, model)
        print(f"## {model}\n")
        for variant in ("default", "while"):
            for cost in ("free", "mtp"):
                for rate in sorted({k[2] for k in runs if k[0] == model and k[1] == cost and k[3] == variant}):
                    res = model_section(model, cost, rate, variant, runs[(model, cost, rate, variant)], proj)
                    if isinstance(res, tuple):
                        lines, w = res
                        winners[(model, cost, rate, variant)] = w
                    else:
                        lines = res
                    print("\n".join(lines))
    print("## Winners per K (verdict column)\n")
    ks = sorted({k for w in winners.values() for k in w})
    print("| model | cost | acceptance | walk | " + " | ".join(f"K={k}" for k in ks) + " |")
    print("|---|---|---|---|" + "---|" * len(ks))
    for key, w in sorted(winners.items()):
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(str(w.get(k) or "-") for k in ks) + " |")
    print()
    if len(argv) == 3:
        print("\n".join(spread(runs, load_runs(argv[2]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
