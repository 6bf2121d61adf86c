#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log per kernel name:
calls, total and mean microseconds, share of the total, largest first
(scripts/device/moe_record.sh). `--per-step N`: also the microseconds per
decode step of N kernels. A log taken with `--print-kernel-base demangled`
keeps each template instance apart (scripts/device/ncu_step.sh)."""
import argparse
import csv
import io
import sys
from collections import defaultdict

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("log", help="ncu --csv output")
ap.add_argument("--per-step", type=int, default=0, help="kernels per decode step (bench decode --breakdown)")
args = ap.parse_args()
per_step = args.per_step
try:
    text = open(args.log, errors="replace").read()
except OSError as e:
    sys.exit(f"error: {args.log}: {e.strerror}")
start = text.find('"ID"')
if start < 0:
    sys.exit("error: no ncu table in " + args.log)
rows = csv.DictReader(io.StringIO(text[start:]))
total = defaultdict(float)
calls = defaultdict(int)
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"].replace("(anonymous namespace)::", "").replace("nextn::cuda::", "")
    name = name.split("(")[0].strip().removeprefix("void ")
    value = float(r["Metric Value"].replace(",", ""))
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(r.get("Metric Unit", "nsecond"), 1e-3)
    total[name] += value * scale
    calls[name] += 1
all_us = sum(total.values())
count = sum(calls.values())
print(f"{count} kernels, {all_us:.1f} us")
if per_step > 0 and count > 0:
    print(f"per step of {per_step} kernels: {all_us * per_step / count:.1f} us (kernel time only)")
print(f"{'kernel':90s} {'calls':>6s} {'total us':>10s} {'mean us':>9s} {'share':>6s}")
for name in sorted(total, key=total.get, reverse=True):
    print(f"{name[:90]:90s} {calls[name]:6d} {total[name]:10.1f} {total[name] / calls[name]:9.2f} {total[name] / all_us:6.1%}")
