#!/usr/bin/env python3
"""Run a llama.cpp tree's convert_hf_to_gguf.py on a Qwen3.5 checkpoint whose
tokenizer the converter does not know.

    convert_qwen35.py LLAMA_SRC MODEL_DIR OUT.gguf OUTTYPE

The converter recognises a BPE pre-tokenizer by hashing how the checkpoint's
tokenizer splits a fixed text; that hash depends on the vocabulary, so a
checkpoint with its own vocabulary (nextn's default model) is refused even
when its pre-tokenizer regex is Qwen3.5's. This wrapper lets the converter
decide first and only maps an unrecognised hash to "qwen35", after checking
that the checkpoint's pre-tokenizer regex is the one llama.cpp's "qwen35"
type implements. Everything else (tensor mapping, MTP layers) is the
converter's own.
"""
import importlib
import json
import sys
from pathlib import Path

# Qwen3.5's split regex (tokenizer.json pre_tokenizer), which llama.cpp's
# LLAMA_VOCAB_PRE_TYPE_QWEN35 implements.
QWEN35_REGEX = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)


def checkpoint_regex(model_dir: Path) -> str | None:
    pre = json.loads((model_dir / "tokenizer.json").read_text())["pre_tokenizer"]
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "Split":
            return p["pattern"].get("Regex")
    return None


def main() -> None:
    src, model_dir, out, outtype = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    sys.path.insert(0, str(src))
    sys.path.insert(1, str(src / "gguf-py"))
    converter = importlib.import_module("convert_hf_to_gguf")
    # TextModel (llama.cpp), Model (ik_llama.cpp and older llama.cpp trees),
    # or, in the newest trees, the conversion package's TextModel.
    text_model = getattr(converter, "TextModel", None) or getattr(converter, "Model", None)
    if text_model is None:
        text_model = importlib.import_module("conversion.base").TextModel
    known = text_model.get_vocab_base_pre
    regex = checkpoint_regex(model_dir)

    def vocab_base_pre(self, tokenizer):
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            if regex != QWEN35_REGEX:
                raise
            print("convert_qwen35: unrecognised tokenizer hash, Qwen3.5 regex: pre-tokenizer qwen35", file=sys.stderr)
            return "qwen35"

    text_model.get_vocab_base_pre = vocab_base_pre
    sys.argv = ["convert_hf_to_gguf.py", str(model_dir), "--outfile", out, "--outtype", outtype]
    converter.main()


if __name__ == "__main__":
    main()
