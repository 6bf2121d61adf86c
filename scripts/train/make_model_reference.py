#!/usr/bin/env python3
"""transformers reference (reference.json + reference.safetensors) for a trained checkpoint dir,
in the format of tests/fixtures (see scripts/fixtures/qwen35_ref.py), so the transformers-oracle
tests of tests/test_qwen35_fixtures.cpp run on it too.

    python scripts/train/make_model_reference.py models/nextn-code-15m [--n-new 16]

CPU, float32 math on the stored (bf16) weights.  Prompts are tried in order; the first whose
greedy rows, teacher-forced rows and MTP draft rows all have a top1-top2 margin of at least
1e-3 * std(row) is kept (so float rounding cannot flip an argmax).  Only the logits are stored
(no per-layer debug tensors) to keep the files small.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))

import torch  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from qwen35_ref import (  # noqa: E402
    MTPHead,
    compute_reference,
    load_hf_model,
    read_safetensors_dir,
    text_config_of,
    write_reference,
)

MARGIN_REL_MIN = 1e-3
PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):\n",
    "class Stack:\n    def __init__(self):\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "for i in range(10):\n",
    "import unittest\n\n\nclass TestList(unittest.TestCase):\n",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--n-new", type=int, default=16)
    args = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_hf_model(args.model_dir)
    mtp = MTPHead(text_config_of(model))
    mtp.inner.set_attn_implementation("eager")
    mtp.load_hf_state_dict({k: v.float() for k, v in read_safetensors_dir(args.model_dir).items() if k.startswith("mtp.")})
    mtp.eval()
    for text in PROMPTS:
        prompt = tok.encode(text).ids
        ref = compute_reference(model, mtp, prompt, args.n_new)
        d = ref["diag"]
        m = min(d["greedy_min_rel_margin"], d["tf_greedy_rows_min_rel_margin"], d["draft_min_rel_margin"])
        ok = m >= MARGIN_REL_MIN and d["teacher_forced_argmax_matches_greedy"] and d["generate_cached_matches_manual"]
        print(f"prompt {text!r}: min rel margin {m:.4g} -> {'OK' if ok else 'next'}")
        if ok:
            break
    else:
        raise SystemExit("error: no prompt with adequate margins")
    ref["debug"] = None
    j = write_reference(args.model_dir, ref, {
        "prompt_text": text,
        "generator": "scripts/train/make_model_reference.py",
        "transformers_class": type(model).__name__,
    })
    print("greedy:", repr(tok.decode(j["greedy_tokens"])))
    print("draft match rate (generated region):", d["draft_match_rate_generated"])


if __name__ == "__main__":
    main()
