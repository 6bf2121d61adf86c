#!/usr/bin/env python3
"""Write a random-weight Qwen3.5 checkpoint at a real model's shapes (HF
ForCausalLM naming, bf16, one safetensors file, with the MTP head) for timing
on the GPU machine. The weights are random (std 1/sqrt(fan_in)), so the text
is noise and MTP acceptance is near zero: use it for speed, never for quality.

    python3 scripts/device/make_synthetic.py --shape 0.8b --out /tmp/synth-0.8b [--layers N]

Uses torch (on the GPU when there is one) and safetensors.
"""
import argparse
import json
import math
import os

import torch
from safetensors.torch import save_file

SHAPES = {
    # hidden, layers, inter, heads, kv_heads, head_dim, lin_k_heads, lin_v_heads, tie
    "0.8b": (1024, 24, 3584, 8, 2, 256, 16, 16, True),
    "4b": (2560, 32, 9216, 16, 4, 256, 16, 32, True),
    "27b": (5120, 64, 17408, 24, 4, 256, 16, 48, False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.8b")
    ap.add_argument("--layers", type=int, default=0, help="override the layer count (keep a multiple of 4)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    H, L, I, Hq, Hkv, hd, Hk, Hv, tie = SHAPES[a.shape]
    if a.layers:
        L = a.layers
    V, dk, dv, K = 248320, 128, 128, 4
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(a.seed)

    def rnd(*shape, std=None):
        std = std if std is not None else 1.0 / math.sqrt(shape[-1])
        return (torch.randn(*shape, generator=g, device=dev, dtype=torch.float32) * std).to(torch.bfloat16).cpu()

    def norm(n, center=0.0):
        return (center + torch.randn(n, generator=g, device=dev) * 0.1).to(torch.bfloat16).cpu()

    t = {"model.embed_tokens.weight": rnd(V, H, std=0.02), "model.norm.weight": norm(H)}
    if not tie:
        t["lm_head.weight"] = rnd(V, H)

    def attn(p):
        t[p + "self_attn.q_proj.weight"] = rnd(Hq * hd * 2, H)
        t[p + "self_attn.k_proj.weight"] = rnd(Hkv * hd, H)
        t[p + "self_attn.v_proj.weight"] = rnd(Hkv * hd, H)
        t[p + "self_attn.o_proj.weight"] = rnd(H, Hq * hd)
        t[p + "self_attn.q_norm.weight"] = norm(hd)
        t[p + "self_attn.k_norm.weight"] = norm(hd)

    def mlp_and_norms(p):
        t[p + "input_layernorm.weight"] = norm(H)
        t[p + "post_attention_layernorm.weight"] = norm(H)
        t[p + "mlp.gate_proj.weight"] = rnd(I, H)
        t[p + "mlp.up_proj.weight"] = rnd(I, H)
        t[p + "mlp.down_proj.weight"] = rnd(H, I)

    cd = 2 * Hk * dk + Hv * dv
    for i in range(L):
        p = f"model.layers.{i}."
        mlp_and_norms(p)
        if (i + 1) % 4 == 0:
            attn(p)
        else:
            q = p + "linear_attn."
            t[q + "in_proj_qkv.weight"] = rnd(cd, H)
            t[q + "in_proj_z.weight"] = rnd(Hv * dv, H)
            t[q + "in_proj_b.weight"] = rnd(Hv, H)
            t[q + "in_proj_a.weight"] = rnd(Hv, H)
            t[q + "conv1d.weight"] = rnd(cd, 1, K, std=0.5)
            t[q + "A_log"] = torch.empty(Hv).uniform_(math.log(0.05), 0.0).float()
            t[q + "dt_bias"] = (torch.randn(Hv) * 0.5).float()
            t[q + "norm.weight"] = norm(dv, 1.0)
            t[q + "out_proj.weight"] = rnd(H, Hv * dv)
    t["mtp.fc.weight"] = rnd(H, 2 * H)
    t["mtp.pre_fc_norm_embedding.weight"] = norm(H)
    t["mtp.pre_fc_norm_hidden.weight"] = norm(H)
    t["mtp.norm.weight"] = norm(H)
    mlp_and_norms("mtp.layers.0.")
    attn("mtp.layers.0.")

    os.makedirs(a.out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    cfg = {
        "model_type": "qwen3_5_text",
        "architectures": ["Qwen3_5ForCausalLM"],
        "hidden_size": H,
        "num_hidden_layers": L,
        "intermediate_size": I,
        "vocab_size": V,
        "num_attention_heads": Hq,
        "num_key_value_heads": Hkv,
        "head_dim": hd,
        "linear_num_key_heads": Hk,
        "linear_key_head_dim": dk,
        "linear_num_value_heads": Hv,
        "linear_value_head_dim": dv,
        "linear_conv_kernel_dim": K,
        "full_attention_interval": 4,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": tie,
        "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "mtp_num_hidden_layers": 1,
        "eos_token_id": 248044,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    n = sum(v.numel() for v in t.values())
    print(f"wrote {a.out}: {a.shape} shape, {L} layers, {n / 1e9:.2f} G parameters")


if __name__ == "__main__":
    main()
