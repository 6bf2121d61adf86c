#!/usr/bin/env python3
"""Issue 24's decode record summary, from the `nextn bench decode --json`
outputs of scripts/device/decode_record.sh (DIR/json/): one row per shape
with shape, quant, decode_tok_s, roofline_share, k4_round_over_step,
k8_round_over_step, kernels_per_token and commit. A value the call did not
measure (a skipped step, a breakdown the backend could not time) is null,
never guessed. Prints markdown; --json OUT writes the rows.

    python3 scripts/decode_record_json.py DIR --commit 0123abc --json decode-h200-<date>.json
"""
import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def median(j, key):
    return j[key]["median"] if j and key in j else None


def row(d, size, commit, quant_made, key=None):
    """key: the files' name part (the size, or SIZE-bf16 for the bf16 preset runs)."""
    key = key or size
    new = load(os.path.join(d, f"decode_{key}_new.json"))
    k4 = load(os.path.join(d, f"mtp4_{key}_new.json"))
    k8 = load(os.path.join(d, f"mtp8_{key}_new.json"))
    step = median(new, "decode_ms_per_token")
    over = lambda j: round(median(j, "decode_ms_per_round") / step, 3) if step and median(j, "decode_ms_per_round") else None
    kernels = None
    for part in ((new or {}).get("breakdown") or {}).get("parts", []):
        if part.get("unit") == "token":
            kernels = round(part["kernels"], 1)
    quant = quant_made  # the checkpoint the record script made; a preset run names its own
    if new and new.get("model", "").startswith("preset ") and "(" in new["model"]:
        quant = new["model"].split("(")[1].split(",")[0]
    return {
        "shape": f"qwen3.5-{size}",
        "quant": quant,
        "decode_tok_s": round(median(new, "decode_tokens_per_second"), 1) if median(new, "decode_tokens_per_second") else None,
        # the CUDA roofline's share (the CPU's roofline reports a memory floor instead)
        "roofline_share": round(new["roofline"]["fraction_of_roofline"], 4)
        if new and "fraction_of_roofline" in new.get("roofline", {}) else None,
        "k4_round_over_step": over(k4),
        "k8_round_over_step": over(k8),
        "kernels_per_token": kernels,
        "commit": commit,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", help="the folder of the bench decode JSON files (decode_record.sh's $OUT/json)")
    ap.add_argument("--commit", required=True, help="the binary's commit (build-cuda/COMMIT)")
    ap.add_argument("--sizes", default="0.8b 4b 27b")
    ap.add_argument("--quant", default="q4", help="the quantization of the checkpoints the runs read")
    ap.add_argument("--bf16-sizes", default="", help="sizes also decoded from bf16 presets (decode_SIZE-bf16_new.json)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        print(f"error: {args.dir}: not a folder", file=sys.stderr)
        return 1
    rows = [row(args.dir, s, args.commit, args.quant) for s in args.sizes.split()]
    rows += [row(args.dir, s, args.commit, "bf16", key=f"{s}-bf16") for s in args.bf16_sizes.split()]
    if all(r["decode_tok_s"] is None for r in rows):
        print(f"error: {args.dir}: no decode_<size>_new.json with decode tokens/s", file=sys.stderr)
        return 1
    cols = ["shape", "quant", "decode_tok_s", "roofline_share", "k4_round_over_step", "k8_round_over_step",
            "kernels_per_token", "commit"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("not measured" if r[c] is None else str(r[c]) for c in cols) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
