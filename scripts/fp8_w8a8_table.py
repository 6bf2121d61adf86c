#!/usr/bin/env python3
"""The W8A8 record's tables and JSON summary, from one device call's
`nextn bench trunk --quant fp8 --json` outputs (W8A16 and --fp8-matmul w8a8)
and formats_record.sh's formats.json rows (fp8 and fp8-w8a8).

    fp8_w8a8_table.py TRUNK_W8A16.json TRUNK_W8A8.json FORMATS.json --json OUT.json > table.md
"""
import argparse
import json


def step_rows(trunk):
    """{preset: {R: (us, copy_share)}} of the summed trunk matmuls of one token."""
    return {p["preset"]: {s["R"]: (s["us"], s["copy_share"]) for s in p["step"]} for p in trunk["presets"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("w8a16")
    ap.add_argument("w8a8")
    ap.add_argument("formats")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    t16, t8 = json.load(open(a.w8a16)), json.load(open(a.w8a8))
    rows = json.load(open(a.formats))
    s16, s8 = step_rows(t16), step_rows(t8)
    errors = []
    for p in t8["presets"]:
        for m in p["matrices"]:
            e = m["w8a8_error"]
            errors.append({"preset": p["preset"], "matrix": m["name"], "rows": m["rows"], "cols": m["cols"], **e})
    # The summary: the per-token step of each kernel, the errors and the decode rows (the full
    # bench outputs, every matrix and row count, are in the raw tarballs).
    steps = {name: {"copy_gbs_min": t["copy_gbs_min"], "copy_gbs_max": t["copy_gbs_max"],
                    "batch_invariant": t["batch_invariant"], "repeats": t["repeats"], "machine": t.get("machine"),
                    "presets": [{"preset": p["preset"], "step": p["step"]} for p in t["presets"]]}
             for name, t in (("w8a16", t16), ("w8a8", t8))}
    out = {"trunk_step": steps, "decode": rows, "w8a8_error": errors,
           "w8a8_error_rel_rms_range": [min(e["rel_rms"] for e in errors), max(e["rel_rms"] for e in errors)],
           "w8a8_error_outliers_rel_rms_range": [min(e["outliers_rel_rms"] for e in errors),
                                                 max(e["outliers_rel_rms"] for e in errors)]}
    json.dump(out, open(a.json, "w"), indent=1)

    print("### Trunk matmuls of one decode token (every matrix times its calls per token; us, share of copy bandwidth)\n")
    rs = t16["rows"]
    print("| preset | kernel | " + " | ".join(f"R={r}" for r in rs) + " |")
    print("|---|---|" + "---:|" * len(rs))
    for preset in s16:
        for name, s in (("W8A16", s16[preset]), ("W8A8", s8[preset])):
            print(f"| {preset} | {name} | " + " | ".join(f"{s[r][0]:.0f} ({100 * s[r][1]:.0f}%)" for r in rs) + " |")
    print("\n### W8A8 against W8A16 (64 rows, same weights and activations)\n")
    print("| preset | matrix | rows x cols | rel L2 | rel max | outliers: rel L2 | outliers: rel max |")
    print("|---|---|---|---:|---:|---:|---:|")
    for e in errors:
        print(f"| {e['preset']} | {e['matrix']} | {e['rows']}x{e['cols']} | {e['rel_rms']:.2e} | {e['rel_max']:.2e} | "
              f"{e['outliers_rel_rms']:.2e} | {e['outliers_rel_max']:.2e} |")
    print("\n### Decode (`bench decode`, formats_record.sh)\n")
    print("| shape | kernel | decode tok/s | % of roofline | K = 4 round / step | commit |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        kind = "W8A8" if r["quant"].endswith("w8a8") else "W8A16"
        print(f"| {r['shape']} | {kind} | {r['decode_tok_s']:.1f} | {100 * r['roofline_share']:.0f}% | "
              f"{r['k4_round_over_step']:.2f} | {r['commit'][:7]} |")


if __name__ == "__main__":
    main()
