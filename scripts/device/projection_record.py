#!/usr/bin/env python3
"""Turns a run_projection.sh output folder (bench.txt, anchors.json,
before.txt, after.txt) into the markdown table rows and the PNG plot of
docs/benchmark_results/q4-projection-h200-<date>.{md,png}. Runs on the
development machine: python3 projection_record.py OUTDIR PNG > table.md"""
import json, re, sys

out, png = sys.argv[1], sys.argv[2]
txt = open(f"{out}/bench.txt").read()
blocks = re.split(r"(?m)^projection ", txt)[1:]
res = []
for b in blocks:
    head = b.splitlines()[0]
    copy = float(re.search(r"read\+write\): (\d+) GB/s", b).group(1))
    floor = float(re.search(r"floor at that rate: ([\d.]+) ms", b).group(1))
    inv = re.search(r"batch invariance.*: (\w+)", b).group(1)
    rows = [tuple(float(x.rstrip('%')) for x in l.split()) for l in b.splitlines() if re.match(r"^\s+\d+ +[\d.]+ ", l)]
    res.append(dict(head=head, copy=copy, floor=floor, inv=inv, rows=rows))
try:
    anc = json.loads(open(f"{out}/anchors.json").read().strip().splitlines()[-1])
except Exception:
    anc = {"tinygemm_ms": {}, "bf16_ms": {}}
tg, bf = anc.get("tinygemm_ms", {}), anc.get("bf16_ms", {})
for r in res:
    print(f"\n### {r['head']}\n\ncopy bandwidth {r['copy']:.0f} GB/s; floor {r['floor']:.4f} ms; batch invariance {r['inv']}\n")
    lm = r["head"].startswith("248320x5120 q4 g64")
    print("| W | ms (median) | min | max | GB/s | % of copy | t/t(1) |" + (" tinygemm int4 ms | cuBLAS bf16 ms |" if lm else ""))
    print("|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if lm else ""))
    for W, ms, mn, mx, gbs, pct, rel in r["rows"]:
        W = int(W)
        extra = f" {tg.get(str(W), float('nan')):.3f} | {bf.get(str(W), float('nan')):.3f} |" if lm else ""
        print(f"| {W} | {ms:.4f} | {mn:.4f} | {mx:.4f} | {gbs:.0f} | {pct:.1f}% | {rel:.3f} |{extra}")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in res:
        if r["head"].startswith("248320x5120 q4 g64"):
            ax.plot([x[0] for x in r["rows"]], [x[1] for x in r["rows"]], "o-", label="nextn q4 g64" + (" + argmax" if "argmax" in r["head"] else ""))
            floor = r["floor"]
    if tg: ax.plot([int(k) for k in tg], list(tg.values()), "s--", label="PyTorch tinygemm int4 g128")
    if bf: ax.plot([int(k) for k in bf], list(bf.values()), "^--", label="cuBLAS bf16 (torch.matmul)")
    ax.axhline(floor, color="gray", ls=":", label=f"floor at copy bandwidth ({floor:.3f} ms)")
    ax.set_xlabel("W (rows = verify width)"); ax.set_ylabel("ms"); ax.set_yscale("log")
    ax.set_title("LM head 248320x5120 projection, H200"); ax.legend(fontsize=8); ax.grid(alpha=0.3)
    fig.tight_layout(); fig.savefig(png, dpi=110)
except Exception as e:
    print(f"(plot failed: {e})", file=sys.stderr)
