#!/usr/bin/env python3
"""Collects formats_record.sh's raw output into the record's rows: one per
(shape, quant), from logs/decode_<shape>_<quant>.txt (greedy `bench decode
--json`), logs/mtp4_<shape>_<quant>.txt (--draft mtp --block-size 4), each
the JSON line among the step's output, and logs/make_<shape>_<quant>.txt
(make-checkpoint's line). Prints a JSON list.

    formats_rows.py LOG_DIR COMMIT_FILE SHAPE... -- QUANT...

k4_round_over_step is the K = 4 round's median ms over the greedy step's
median ms (the decode record's "K = 4 round / step"). A missing or failed
run leaves its fields null and names the file in `error`.
"""
import json
import os
import re
import sys


def load_json(path):
    """The last line of `path` that parses as a JSON object, else None."""
    try:
        with open(path) as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def row(log, commit, shape, quant):
    r = {"shape": shape, "quant": quant, "decode_tok_s": None, "roofline_share": None,
         "k4_round_over_step": None, "commit": commit, "step_ms": None, "k4_round_ms": None,
         "bytes_per_token": None, "checkpoint_gib": None, "make_s": None}
    errors = []
    try:
        with open(os.path.join(log, f"make_{shape}_{quant}.txt")) as f:
            m = re.search(r"([0-9.]+) GiB in \d+ shards?, ([0-9.]+) s", f.read())
        if m:
            r["checkpoint_gib"], r["make_s"] = float(m.group(1)), float(m.group(2))
    except OSError:
        pass
    d = load_json(os.path.join(log, f"decode_{shape}_{quant}.txt"))
    if d:
        r["decode_tok_s"] = d["decode_tokens_per_second"]["median"]
        r["step_ms"] = d["decode_ms_per_token"]["median"]
        roof = d.get("roofline", {})
        r["roofline_share"] = roof.get("fraction_of_roofline")
        r["bytes_per_token"] = roof.get("bytes_per_token")
    else:
        errors.append(f"decode_{shape}_{quant}")
    k = load_json(os.path.join(log, f"mtp4_{shape}_{quant}.txt"))
    if k and "decode_ms_per_round" in k:
        r["k4_round_ms"] = k["decode_ms_per_round"]["median"]
        if r["step_ms"]:
            r["k4_round_over_step"] = r["k4_round_ms"] / r["step_ms"]
    else:
        errors.append(f"mtp4_{shape}_{quant}")
    if errors:
        r["error"] = "no result: " + ", ".join(errors) + " (see logs.tar.gz)"
    return r


def main() -> int:
    args = sys.argv[1:]
    if len(args) < 4 or "--" not in args[2:]:
        print("error: usage: formats_rows.py LOG_DIR COMMIT_FILE SHAPE... -- QUANT...", file=sys.stderr)
        return 1
    log, commit_file = args[0], args[1]
    sep = args.index("--", 2)
    shapes, quants = args[2:sep], args[sep + 1:]
    try:
        with open(commit_file) as f:
            commit = " ".join(f.read().split())
    except OSError:
        commit = "unknown"
    print(json.dumps([row(log, commit, s, q) for s in shapes for q in quants], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
