#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log per kernel name:
calls, total and mean microseconds, share of the total, largest first
(scripts/device/moe_record.sh)."""
import csv
import io
import sys
from collections import defaultdict

text = open(sys.argv[1], errors="replace").read()
start = text.find('"ID"')
if start < 0:
    sys.exit("no ncu table in " + sys.argv[1])
rows = csv.DictReader(io.StringIO(text[start:]))
total = defaultdict(float)
calls = defaultdict(int)
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"].split("(")[0].split("<")[0].strip()
    value = float(r["Metric Value"].replace(",", ""))
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(r.get("Metric Unit", "nsecond"), 1e-3)
    total[name] += value * scale
    calls[name] += 1
all_us = sum(total.values())
print(f"{sum(calls.values())} kernels, {all_us:.1f} us")
print(f"{'kernel':60s} {'calls':>6s} {'total us':>10s} {'mean us':>9s} {'share':>6s}")
for name in sorted(total, key=total.get, reverse=True):
    print(f"{name[:60]:60s} {calls[name]:6d} {total[name]:10.1f} {total[name] / calls[name]:9.2f} {total[name] / all_us:6.1%}")
