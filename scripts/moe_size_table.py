#!/usr/bin/env python3
"""Prints docs/moe.md's size table of the real-shape MoE presets: the tensor
bytes of each preset's checkpoint in q4 and bf16, and the bytes the largest
tensor-parallel rank holds at 1, 2, 4 and 8 ranks, each number from
`nextn make-checkpoint --size-only --json` (nothing is written).

    python3 scripts/moe_size_table.py build/nextn > table.md
"""
import json
import subprocess
import sys

PRESETS = ["qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "gemma4-26b-a4b", "gemma4-26b-a4b-assistant"]
QUANTS = ["q4", "bf16"]
DEGREES = [1, 2, 4, 8]
GIB = 1 << 30


def size(nextn, preset, quant, degree):
    """The --size-only JSON object, or None where the degree is refused (Gemma 4 is not split)."""
    r = subprocess.run([nextn, "make-checkpoint", "--preset", preset, "--quant", quant, "--size-only",
                        "--tensor-parallel", str(degree), "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        if degree > 1:
            return None
        raise RuntimeError(f"{preset} {quant}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main() -> int:
    if len(sys.argv) != 2:
        print("error: usage: moe_size_table.py NEXTN_BINARY", file=sys.stderr)
        return 1
    nextn = sys.argv[1]
    print("| preset | quant | tensors | total GiB | " + " | ".join(f"TP {n}: GiB per rank" for n in DEGREES) + " |")
    print("|---|---|---:|---:|" + "---:|" * len(DEGREES))
    try:
        for p in PRESETS:
            for q in QUANTS:
                cells = [size(nextn, p, q, n) for n in DEGREES]
                whole = cells[0]
                ranks = ["-" if c is None else f"{max(c['rank_bytes']) / GIB:.2f}" for c in cells]
                print(f"| {p} | {q} | {whole['tensors']} | {whole['total_bytes'] / GIB:.2f} | " + " | ".join(ranks) + " |")
    except (OSError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
