#!/usr/bin/env python3
"""Corpus + tokenizer for nextn's own small code model (CPU, no network).

    python scripts/train/prepare_corpus.py --out DIR [--vocab 8192]

Corpus: Python sources that exist on this machine, each file one document
followed by <|endoftext|>:
  * the CPython 3.11 standard library including its test suite (PSF-2.0),
    from the interpreter running this script (site-packages excluded);
  * a fixed allow-list of Debian-packaged, permissively licensed Python
    packages under /usr/lib/python3/dist-packages (licence per package below;
    vendored trees skipped, their licences differ).
Files over 256 KB (generated tables) and files that are not UTF-8 are skipped.
About 2% of the files (chosen by a hash of the path, so reproducible) are held
out.

Tokenizer: byte-level BPE trained with HF `tokenizers`, built like Qwen3.5's
tokenizer.json: NFC normalizer; Split(Qwen3.5 regex, Isolated) + ByteLevel(
add_prefix_space=False, use_regex=False) pre-tokenizer; ByteLevel decoder;
special tokens <|endoftext|>, <|im_start|>, <|im_end|> after the BPE vocab
(as in Qwen).  tokenizer_config.json carries Qwen3.5's chat template.

Outputs in DIR: tokenizer.json, tokenizer_config.json, train.u16, heldout.u16
(uint16 token ids, documents concatenated), corpus.json (file list, sizes,
licences, token counts).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sysconfig

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN35_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT = SPECIAL_TOKENS[0]
MAX_FILE_BYTES = 256 * 1024
HELDOUT_PERCENT = 2

DIST = "/usr/lib/python3/dist-packages"
# package path (under DIST) -> licence (from /usr/share/doc/<package>/copyright)
DIST_ALLOWLIST = {
    "pip": "MIT",
    "setuptools": "MIT",
    "pkg_resources": "MIT",
    "pygments": "BSD-2-Clause",
    "pyparsing": "MIT",
    "six.py": "MIT",
    "yaml": "MIT",
    "distro": "Apache-2.0",
    "httplib2": "MIT AND BSD-3-Clause",  # socks.py is BSD-3-Clause
    "jwt": "MIT",
    "oauthlib": "BSD-3-Clause",
    "blinker": "MIT",
    "toml": "MIT",
    "pyflakes": "MIT",
    "wheel": "MIT",
    "xmltodict.py": "MIT",
    "argcomplete": "Apache-2.0",
    "crcmod": "MIT",
    "cryptography": "Apache-2.0 OR BSD-3-Clause",
}


def py_files(root: str, skip_dirs: set[str]) -> list[str]:
    if os.path.isfile(root):
        return [root]
    out = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = sorted(s for s in subdirs if s not in skip_dirs and s != "__pycache__")
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return out


def collect() -> list[dict]:
    """[{path, licence, text}] in a fixed order."""
    stdlib = sysconfig.get_paths()["stdlib"]
    sources = [(p, "PSF-2.0", "stdlib") for p in py_files(stdlib, {"site-packages", "dist-packages"})]
    for name, lic in DIST_ALLOWLIST.items():
        path = os.path.join(DIST, name)
        if os.path.exists(path):
            sources += [(p, lic, name) for p in py_files(path, {"_vendor", "vendor"})]
    docs = []
    for path, lic, group in sources:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            docs.append({"path": path, "licence": lic, "group": group, "text": text})
    return docs


def is_heldout(path: str) -> bool:
    return int(hashlib.sha256(path.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT


def train_tokenizer(texts: list[str], vocab: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab - len(SPECIAL_TOKENS),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    # Specials after the BPE vocab, as in Qwen's tokenizer.json.
    tok.add_special_tokens(SPECIAL_TOKENS)
    assert tok.get_vocab_size() == vocab, tok.get_vocab_size()
    return tok


def save_tokenizer(tok: Tokenizer, path: str):
    """tokenizer.json; the ByteLevel decoder's flags spelled as in Qwen's file (the Python binding
    ignores them, they do not change decoding)."""
    j = json.loads(tok.to_str())
    j["decoder"].update(add_prefix_space=False, trim_offsets=False, use_regex=False)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
        f.write("\n")
    again = Tokenizer.from_file(path)
    assert again.encode("def f(x):\n    return x  # é\n").ids == tok.encode("def f(x):\n    return x  # é\n").ids


def tokenizer_config(tok: Tokenizer, template: str) -> dict:
    decoder = {}
    for t in SPECIAL_TOKENS:
        decoder[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        # A base model trained on documents separated by <|endoftext|>.
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def encode_docs(tok: Tokenizer, docs: list[dict]) -> np.ndarray:
    eot = tok.token_to_id(EOT)
    ids = []
    batch = 256
    for i in range(0, len(docs), batch):
        for enc in tok.encode_batch([d["text"] for d in docs[i:i + batch]], add_special_tokens=False):
            ids.extend(enc.ids)
            ids.append(eot)
    arr = np.asarray(ids, dtype=np.uint32)
    assert arr.max() < 65536
    return arr.astype(np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=8192)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    docs = collect()
    train_docs = [d for d in docs if not is_heldout(d["path"])]
    held_docs = [d for d in docs if is_heldout(d["path"])]
    print(f"{len(docs)} files, {sum(len(d['text'].encode()) for d in docs)} bytes; "
          f"held out {len(held_docs)} files", flush=True)

    tok = train_tokenizer([d["text"] for d in train_docs], args.vocab)
    save_tokenizer(tok, os.path.join(args.out, "tokenizer.json"))
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "qwen35_chat_template.jinja")) as f:
        template = f.read()
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(tok, template), f, indent=2, ensure_ascii=False)
        f.write("\n")

    train = encode_docs(tok, train_docs)
    held = encode_docs(tok, held_docs)
    train.tofile(os.path.join(args.out, "train.u16"))
    held.tofile(os.path.join(args.out, "heldout.u16"))

    groups: dict[str, dict] = {}
    for d in docs:
        g = groups.setdefault(d["group"], {"licence": d["licence"], "files": 0, "bytes": 0})
        g["files"] += 1
        g["bytes"] += len(d["text"].encode())
    manifest = {
        "groups": groups,
        "files": len(docs),
        "bytes": sum(g["bytes"] for g in groups.values()),
        "train_files": len(train_docs),
        "heldout_files": len(held_docs),
        "heldout_paths": [d["path"] for d in held_docs],
        "train_tokens": int(train.size),
        "heldout_tokens": int(held.size),
        "vocab_size": tok.get_vocab_size(),
        "special_token_ids": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
    }
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(json.dumps({k: v for k, v in manifest.items() if k != "heldout_paths"}, indent=1))


if __name__ == "__main__":
    main()
