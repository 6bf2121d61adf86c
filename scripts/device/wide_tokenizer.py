#!/usr/bin/env python3
"""A tokenizer.json for random-weight checkpoints at real vocabulary sizes:
the default model's tokenizer with its vocabulary extended to N ids, every
new id decoding to its own text (" t<id>"). The serving benchmarks time the
streamed text events; with the default 8192-id tokenizer a 248320-id model's
tokens mostly decode to nothing and send no event. Not committed: written on
the device next to the checkpoint.

    python3 scripts/device/wide_tokenizer.py models/default/tokenizer.json 248320 OUT/tokenizer.json
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 4:
        print("error: usage: wide_tokenizer.py TOKENIZER_JSON VOCAB OUT", file=sys.stderr)
        return 1
    src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(src) as f:
        t = json.load(f)
    vocab = t["model"]["vocab"]
    taken = set(vocab.values()) | {a["id"] for a in t["added_tokens"]}
    for i in range(n):
        if i not in taken:
            vocab["\u0120t%d" % i] = i  # byte-level: U+0120 is the space byte
    with open(out, "w") as f:
        json.dump(t, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
