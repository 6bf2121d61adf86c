#!/usr/bin/env python3
"""MTP acceptance of a model under nextn itself (CPU), on held-out files of the corpus.

    python scripts/train/nextn_acceptance.py models/nextn-code-15m [--nextn build/nextn] [--files 16]

For each of the first --files held-out files (corpus.json's heldout_paths, as prepare_corpus.py
wrote them), the first --prompt tokens are the prompt and nextn generates --new tokens greedily
with --draft mtp --block-size K.  Prints per-draft-position acceptance (rounds in which drafts
1..k were all accepted / rounds), tokens per round, and checks that the output equals --draft none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

from tokenizers import Tokenizer


def generate(nextn: str, model: str, ids: list[int], n: int, extra: list[str]) -> dict:
    cmd = [nextn, "generate", "-m", model, "--prompt-ids", ",".join(map(str, ids)), "-n", str(n), "--json"] + extra
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--nextn", default="build/nextn")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=48)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=4)
    args = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    with open(os.path.join(args.model, "corpus.json")) as f:
        paths = [p for p in json.load(f)["heldout_paths"] if os.path.exists(p)][: args.files]
    drafts = args.block_size - 1
    acc = [0] * drafts
    rounds = generated = 0
    identical = True
    for p in paths:
        with open(p, encoding="utf-8") as f:
            ids = tok.encode(f.read()).ids[: args.prompt]
        spec = generate(args.nextn, args.model, ids, args.new, ["--draft", "mtp", "--block-size", str(args.block_size)])
        plain = generate(args.nextn, args.model, ids, args.new, ["--draft", "none"])
        identical &= spec["tokens"] == plain["tokens"]
        st = spec["stats"]
        for k in range(drafts):
            acc[k] += st["accepted_at"][k]
        rounds += st["rounds"]
        generated += st["generated"]
    out = {
        "files": len(paths), "prompt_tokens": args.prompt, "new_tokens": args.new, "block_size": args.block_size,
        "rounds": rounds, "accepted_at_rate": [a / rounds for a in acc], "tokens_per_round": generated / rounds,
        "spec_equals_plain_greedy": identical,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
