#!/usr/bin/env python3
"""Draft-vocabulary coverage: the share of a tokenizer's output ids below N.

A draft vocabulary of N (`--draft-vocab N`, docs/speculative.md) lets the MTP
head propose only ids [0, N), so the share of real text's tokens with id >= N
bounds how often a subset cannot propose the right token. This script
tokenizes the repository's own prose (README.md, docs/**/*.md) and code
(src/, tools/, tests/*.cpp|h|cu|cuh; scripts/**/*.py) with `nextn tokenize` (one call per
corpus: the files concatenated) and prints, per corpus and N, the share of
tokens with id < N as a Markdown table.

  scripts/draft_vocab_coverage.py -m DIR [--nextn build/nextn] [--sizes 16384,32768,65536]

DIR is a directory holding a tokenizer.json (a checkpoint or a tokenizer
fixture). Only the Python standard library is needed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_SUFFIXES = {".cpp", ".h", ".cu", ".cuh"}


def corpora() -> dict[str, list[Path]]:
    prose = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    code = sorted(p for d in ("src", "tools", "tests") for p in (ROOT / d).rglob("*") if p.suffix in CODE_SUFFIXES)
    python = sorted((ROOT / "scripts").rglob("*.py"))
    return {"prose (README.md, docs/**/*.md)": prose, "code (src, tools, tests: C++/CUDA)": code,
            "code (scripts/**/*.py: Python)": python}


def vocab_size(model_dir: Path) -> int:
    t = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    ids = list(t["model"]["vocab"].values()) + [a["id"] for a in t.get("added_tokens", [])]
    return max(ids) + 1


def token_ids(nextn: str, model_dir: Path, files: list[Path]) -> list[int]:
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        for p in files:
            f.write(p.read_bytes())
            f.write(b"\n")
        path = f.name
    try:
        out = subprocess.run([nextn, "tokenize", "-m", str(model_dir), "--file", path, "--no-special", "--json"],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return json.loads(out)["ids"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="directory with tokenizer.json")
    ap.add_argument("--nextn", default=str(ROOT / "build" / "nextn"), help="the nextn binary (default build/nextn)")
    ap.add_argument("--sizes", default="16384,32768,65536", help="comma-separated draft vocabulary sizes N")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if any(n < 1 for n in sizes):
        print("error: --sizes: every N must be at least 1", file=sys.stderr)
        return 1
    model = Path(a.model)
    V = vocab_size(model)
    print(f"tokenizer {model} ({V} ids); share of tokens with id < N\n")
    print("| corpus | tokens | " + " | ".join(f"N = {n}" for n in sizes) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in sizes) + " |")
    for name, files in corpora().items():
        ids = token_ids(a.nextn, model, files)
        shares = [sum(1 for t in ids if t < n) / max(1, len(ids)) for n in sizes]
        print(f"| {name}, {len(files)} files | {len(ids)} | " + " | ".join(f"{s:.4f}" for s in shares) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
