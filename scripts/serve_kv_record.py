#!/usr/bin/env python3
"""The 2026-12-04 serving record (docs/benchmark_results/serve-h200-2026-12-04.md):
reads the raw files of its device calls (the -raw.tar.gz beside the record,
unpacked) and writes the JSON summary; prints the markdown tables.

  tar xzf docs/benchmark_results/serve-h200-2026-12-04-raw.tar.gz -C /tmp
  python3 scripts/serve_kv_record.py /tmp/serve-h200-2026-12-04-raw \
      --json docs/benchmark_results/serve-h200-2026-12-04.json
"""
import argparse
import glob
import json
import os
import re

# Issue 23's targets at the 27B shape: plain tok/s per stream count, MTP (oracle) over plain.
PLAIN_TARGET = {1: 106, 4: 400, 16: 1300, 32: 2200}
MTP_TARGET = {1: 2.0, 4: 1.3, 16: 1.0, 32: 1.0}


def one(raw, name):
    """The one file `name` in the raw folder's commit folders."""
    found = glob.glob(os.path.join(raw, "*", name))
    if len(found) != 1:
        raise SystemExit(f"error: {raw}: expected one */{name}, found {len(found)}")
    return found[0]


def serve_tables(raw):
    out = {}
    for path in sorted(glob.glob(os.path.join(raw, "*", "serve_table-*.json"))):
        commit = os.path.basename(os.path.dirname(path))
        preset = re.match(r"serve_table-(.*)\.json", os.path.basename(path)).group(1)
        rows = json.load(open(path))
        plain = {r["streams"]: r["total_tokens_per_s"] for r in rows if r["draft"] == "none"}
        table = []
        for r in rows:
            row = {k: r[k] for k in ("draft", "streams", "total_tokens_per_s", "per_stream_tokens_per_s",
                                     "requests_per_step", "mean_block_size_chosen", "tokens_per_round")}
            row["x_plain"] = r["total_tokens_per_s"] / plain[r["streams"]]
            if preset == "qwen3.5-27b":
                row["target"] = PLAIN_TARGET[r["streams"]] if r["draft"] == "none" else MTP_TARGET[r["streams"]]
            table.append(row)
        out[preset] = {"commit": commit, "rows": table}
    return out


def stall_rows(raw):
    rows = []
    for path in sorted(glob.glob(os.path.join(raw, "*", "prefill_stall-*.json"))):
        for r in json.load(open(path)):
            rows.append(dict(r, commit=os.path.basename(os.path.dirname(path)), call=os.path.basename(path)))
    return sorted(rows, key=lambda r: (r["prefill_chunk"], r["call"]))


def kv_memory(raw):
    text = open(one(raw, "kv_memory-summary.txt")).read()
    start = int(re.search(r"listening; device memory (\d+) MiB", text).group(1))
    after = int(re.search(r"after the request: device memory (\d+) MiB", text).group(1))
    blocks = json.loads(re.search(r"kv metrics after it: (\{.*\})", text).group(1).replace("'", '"'))
    prompt = int(re.search(r"one request of (\d+) prompt tokens", text).group(1))
    return {"serve_args": "--max-batch 32 --max-prompt-tokens 30000 --max-tokens 64", "preset": "qwen3.5-27b q4",
            "device_mib_at_start": start, "device_mib_after_request": after, "request_prompt_tokens": prompt,
            "kv_blocks_allocated_after": int(blocks["nextn_kv_blocks_allocated"]),
            "kv_blocks_limit": int(blocks["nextn_kv_blocks_limit"])}


def decode(raw):
    d = json.load(open(one(raw, "decode-27b.json")))
    return {"command": "nextn bench decode --backend cuda --preset qwen3.5-27b --quant q4 --seed 0 --prompt-len 16 "
                       "-n 128 --repeats 3 --json", "decode_tokens_per_second": d["decode_tokens_per_second"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--json")
    a = ap.parse_args()
    summary = {"date": "2026-12-04", "issue": 23,
               "machine": "one NVIDIA H200 (driver 580.159.04, SM 1980 MHz under load), 16 host cores",
               "repeats": 1, "serve": serve_tables(a.raw), "prefill_stall": stall_rows(a.raw),
               "kv_memory": kv_memory(a.raw), "decode_27b": decode(a.raw)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    for preset, t in summary["serve"].items():
        print(f"\n{preset} ({t['commit']})\n")
        print("| draft | streams | total tok/s | x plain | mean K | requests per step |" +
              (" target |" if preset == "qwen3.5-27b" else ""))
        print("|---|---:|---:|---:|---:|---:|" + ("---:|" if preset == "qwen3.5-27b" else ""))
        for r in t["rows"]:
            tgt = ""
            if "target" in r:
                tgt = f" {r['target']} |" if r["draft"] == "none" else f" {r['target']:.1f}x |"
            print(f"| {r['draft']} | {r['streams']} | {r['total_tokens_per_s']:.1f} | {r['x_plain']:.2f} | "
                  f"{r['mean_block_size_chosen']:.2f} | {r['requests_per_step']:.1f} |{tgt}")
    print("\n| --prefill-chunk | median gap before, ms | median while the prompt arrives | p99 | max | "
          "p99 / median before | its first token, ms | call |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in summary["prefill_stall"]:
        print(f"| {r['prefill_chunk']} | {r['median_gap_before_ms']:.1f} | {r['median_gap_during_ms']:.1f} | "
              f"{r['p99_gap_during_ms']:.1f} | {r['max_gap_during_ms']:.1f} | {r['p99_over_median']:.2f} | "
              f"{r['long_prompt_ttft_ms']:.0f} | {r['call']} |")
    print("\n", json.dumps(summary["kv_memory"]), "\n", json.dumps(summary["decode_27b"]))


if __name__ == "__main__":
    main()
