#!/usr/bin/env python3
"""Train nextn's own small Qwen3.5-architecture code model with one MTP layer.

    python scripts/train/train_nextn_code.py --data DIR --out DIR [--size full|tiny] [--seconds 400]

DIR (--data) is what prepare_corpus.py wrote: train.u16, heldout.u16,
tokenizer.json, tokenizer_config.json.

The trunk is transformers' Qwen3_5ForCausalLM (qwen3_5_text, hybrid Gated
DeltaNet / gated full attention, tied embeddings).  transformers has no MTP
head, so it is the MTPHead of scripts/fixtures/qwen35_ref.py, i.e. exactly
what nextn computes (src/backend/cpu/qwen35.cpp, mtp_run):

    u_p   = fc(concat[pre_fc_norm_embedding(embed(tok[p+1])), pre_fc_norm_hidden(h[p])])
    m_p   = mtp.norm(mtp.layers.0(u_p, position p))      # h = trunk output after model.norm
    logits= lm_head(m_p)                                  # predicts tok[p+2]

Loss = CE(next token) + MTP_WEIGHT * CE(MTP: token p+2).  Training stops on
wall time; then held-out losses and a chained-draft acceptance measurement
are computed in float32 from the bf16-rounded weights (what nextn loads), and
the checkpoint is written in the HF layout (bf16, sharded, mtp.* in its own
shard) with the tokenizer files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
for d in (os.path.join(HERE, "..", "fixtures"), HERE):
    sys.path.insert(0, d)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import GenerationConfig, Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

from qwen35_ref import MTPHead  # noqa: E402

MTP_WEIGHT = 0.3  # next-next token (first draft)
MTP_CHAIN_WEIGHT = 0.15  # token p+3 through the chain (second draft)
SIZES = {
    # ~14.7M parameters (trunk + MTP), 29 MB in bf16.
    "full": dict(hidden=384, inter=640, layers=8, heads=6, kv_heads=2, head_dim=64,
                 lk_heads=4, lv_heads=4, dk=64, dv=64, mrope_section=[4, 2, 2],
                 batch=64, seq=512, lr=2e-3, warmup=150),
    # CPU smoke test of the whole script.
    "tiny": dict(hidden=64, inter=128, layers=4, heads=4, kv_heads=2, head_dim=32,
                 lk_heads=2, lv_heads=2, dk=16, dv=16, mrope_section=[2, 1, 1],
                 batch=4, seq=64, lr=2e-3, warmup=5),
}


def log(*a):
    print(*a, flush=True)


def text_config(s: dict, vocab: int, eos: int) -> Qwen3_5TextConfig:
    return Qwen3_5TextConfig(
        vocab_size=vocab,
        hidden_size=s["hidden"],
        intermediate_size=s["inter"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        head_dim=s["head_dim"],
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=s["dk"],
        linear_value_head_dim=s["dv"],
        linear_num_key_heads=s["lk_heads"],
        linear_num_value_heads=s["lv_heads"],
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e7,
            "partial_rotary_factor": 0.25,
            "mrope_section": list(s["mrope_section"]),
            "mrope_interleaved": True,
        },
        # full attention every 4th layer, as in the released Qwen3.5 models
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(s["layers"])],
        eos_token_id=eos,
        mtp_num_hidden_layers=1,
    )


def mtp_logits(model, mtp: MTPHead, next_tok: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """next_tok: [B, T] (tok[p+1]); h: [B, T, H] trunk post-norm hidden at p -> [B, T, V] (predicts tok[p+2])."""
    embed = model.model.embed_tokens
    u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(embed(next_tok)), mtp.pre_fc_norm_hidden(h)], dim=-1))
    out = mtp.inner(inputs_embeds=u, use_cache=False).last_hidden_state
    return model.lm_head(out), out


def losses(model, mtp, win: torch.Tensor):
    """win: [B, T+2] token windows -> (next-token CE, MTP CE, chained-MTP CE), all means.

    The chained term trains the second draft of a chain: nextn's mtp_step feeds the MTP's own output
    (after mtp.norm) back with the drafted token, so row p of step 2 takes (m[p], tok[p+2]) and
    predicts tok[p+3].  (In training its rows attend to other step-2 rows, at inference to the
    teacher-forced rows in the MTP cache: an approximation, used only for the loss.)"""
    T = win.shape[1] - 2
    x = win[:, :T]
    h = model.model(input_ids=x, use_cache=False).last_hidden_state
    logits = model.lm_head(h)
    ce = F.cross_entropy(logits.float().flatten(0, 1), win[:, 1:T + 1].flatten())
    ml, m = mtp_logits(model, mtp, win[:, 1:T + 1], h)
    ce_mtp = F.cross_entropy(ml.float().flatten(0, 1), win[:, 2:T + 2].flatten())
    ml2, _ = mtp_logits(model, mtp, win[:, 2:T + 1], m[:, :T - 1])
    ce_mtp2 = F.cross_entropy(ml2.float().flatten(0, 1), win[:, 3:T + 2].flatten())
    return ce, ce_mtp, ce_mtp2


@torch.no_grad()
def heldout_losses(model, mtp, held: torch.Tensor, T: int, batch: int):
    n = (held.numel() - 2) // T
    tot, tot_m, tot_m2, cnt = 0.0, 0.0, 0.0, 0
    for i in range(0, n, batch):
        idx = torch.arange(i, min(n, i + batch), device=held.device)
        win = held[(idx[:, None] * T + torch.arange(T + 2, device=held.device)[None])]
        ce, cm, cm2 = losses(model, mtp, win)
        tot += ce.item() * len(idx)
        tot_m += cm.item() * len(idx)
        tot_m2 += cm2.item() * len(idx)
        cnt += len(idx)
    return tot / cnt, tot_m / cnt, tot_m2 / cnt, n * T


@torch.no_grad()
def chain_acceptance(model, mtp, held: torch.Tensor, T: int, n_seq: int, drafts: int, positions: list[int]):
    """Greedy speculative decoding with an MTP chain, as nextn runs it, measured on held-out text.

    For each held-out window c and each cut p: the committed context is c[0..p]; the target's greedy
    tokens after it are t1..t_{drafts+1}.  The MTP cache holds teacher-forced rows 0..p-1 (row q from
    h[q] and c[q+1]); the chain is d1 = MTP(h[p], t1), d_{k+1} = MTP(m_k, d_k) with m_k the MTP output
    after mtp.norm.  Draft k is accepted when d1..dk all equal t2..t_{k+1}.  Returns per-draft-position
    acceptance rates and the mean number accepted per step."""
    dev = held.device
    n = min(n_seq, (held.numel() - 1) // T)
    wins = held[(torch.arange(n, device=dev)[:, None] * T + torch.arange(T, device=dev)[None])]
    embed = model.model.embed_tokens
    acc = torch.zeros(drafts, device=dev)
    total = 0
    for p in positions:
        if p + 1 > T:
            continue
        ctx = wins[:, :p + 1]
        seq = ctx
        greedy = []
        hidden = None
        for k in range(drafts + 1):
            h = model.model(input_ids=seq, use_cache=False).last_hidden_state
            if k == 0:
                hidden = h
            t = model.lm_head(h[:, -1]).argmax(-1)
            greedy.append(t)
            seq = torch.cat([seq, t[:, None]], dim=1)
        # teacher-forced MTP rows 0..p-1, then the chain rows at p, p+1, ...
        u_tf = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(embed(ctx[:, 1:])),
                                 mtp.pre_fc_norm_hidden(hidden[:, :p])], dim=-1))
        tok, hid = greedy[0], hidden[:, p]
        rows = u_tf
        ok = torch.ones(n, dtype=torch.bool, device=dev)
        for k in range(drafts):
            u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(embed(tok)), mtp.pre_fc_norm_hidden(hid)], dim=-1))
            rows = torch.cat([rows, u[:, None]], dim=1)
            out = mtp.inner(inputs_embeds=rows, use_cache=False).last_hidden_state
            hid = out[:, -1]
            d = model.lm_head(hid).argmax(-1)
            ok = ok & (d == greedy[k + 1])
            acc[k] += ok.sum()
            tok = d
        total += n
    rates = (acc / max(total, 1)).tolist()
    return {"drafts": drafts, "samples": total, "accepted_at": rates, "mean_accepted_per_step": float(sum(rates))}


def save_checkpoint(model, mtp, cfg: Qwen3_5TextConfig, data_dir: str, out: str, shard: str):
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, max_shard_size=shard, safe_serialization=True)
    mtp_sd = {k: v.to(torch.bfloat16).contiguous() for k, v in mtp.hf_state_dict().items()}
    # mtp.* in its own extra shard (the layout of the released checkpoints' index)
    idx_path = os.path.join(out, "model.safetensors.index.json")
    if os.path.exists(idx_path):
        with open(idx_path) as f:
            idx = json.load(f)
    else:
        single = "model.safetensors"
        from safetensors import safe_open
        with safe_open(os.path.join(out, single), "pt") as f:
            keys = list(f.keys())
        idx = {"metadata": {"total_size": os.path.getsize(os.path.join(out, single))},
               "weight_map": {k: single for k in keys}}
        os.rename(os.path.join(out, single), os.path.join(out, "model-00001-of-00001.safetensors"))
        idx["weight_map"] = {k: "model-00001-of-00001.safetensors" for k in keys}
    old = sorted(set(idx["weight_map"].values()))
    n_new = len(old) + 1
    rename = {fn: f"model-{i:05d}-of-{n_new:05d}.safetensors" for i, fn in enumerate(old, start=1)}
    for a, b in rename.items():
        os.rename(os.path.join(out, a), os.path.join(out, b))
    mtp_file = f"model-{n_new:05d}-of-{n_new:05d}.safetensors"
    save_file(mtp_sd, os.path.join(out, mtp_file), metadata={"format": "pt"})
    wm = {k: rename[v] for k, v in idx["weight_map"].items()}
    wm.update({k: mtp_file for k in mtp_sd})
    idx["weight_map"] = dict(sorted(wm.items()))
    idx["metadata"]["total_size"] = int(idx["metadata"]["total_size"]) + sum(
        t.numel() * t.element_size() for t in mtp_sd.values())
    with open(idx_path, "w") as f:
        json.dump(idx, f, indent=2)
        f.write("\n")
    # config.json: record the MTP layer (save_pretrained writes the text config as is)
    cpath = os.path.join(out, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    c["mtp_num_hidden_layers"] = 1
    c["mtp_use_dedicated_embeddings"] = False
    c["full_attention_interval"] = 4
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(data_dir, fn), os.path.join(out, fn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="full", choices=sorted(SIZES))
    ap.add_argument("--seconds", type=float, default=400.0)
    ap.add_argument("--max-steps", type=int, default=10 ** 9)
    ap.add_argument("--shard", default="12MB")
    ap.add_argument("--acc-seqs", type=int, default=128)
    ap.add_argument("--heldout-max-tokens", type=int, default=0, help="0: all held-out tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu-autocast", action="store_true", help="bf16 autocast on CPU too (smoke test of the GPU path)")
    args = ap.parse_args()
    s = SIZES[args.size]
    torch.manual_seed(args.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log(f"device {dev}, torch {torch.__version__}")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    with open(os.path.join(args.data, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    ids = {v["content"]: int(k) for k, v in tcfg["added_tokens_decoder"].items()}
    eos = ids["<|endoftext|>"]
    vocab = max(ids.values()) + 1
    train = torch.from_numpy(np.fromfile(os.path.join(args.data, "train.u16"), dtype=np.uint16).astype(np.int64)).to(dev)
    held = torch.from_numpy(np.fromfile(os.path.join(args.data, "heldout.u16"), dtype=np.uint16).astype(np.int64)).to(dev)
    if args.heldout_max_tokens:
        held = held[:args.heldout_max_tokens]
    log(f"train tokens {train.numel()}, held-out tokens {held.numel()}, vocab {vocab}")

    cfg = text_config(s, vocab, eos)
    model = Qwen3_5ForCausalLM(cfg)
    mtp = MTPHead(cfg)
    model.set_attn_implementation("sdpa")
    mtp.inner.set_attn_implementation("sdpa")
    model.to(dev).train()
    mtp.to(dev).train()
    n_trunk = sum(p.numel() for p in model.parameters())
    mtp_params = [p for n, p in mtp.named_parameters() if "embed_tokens" not in n]
    n_mtp = sum(p.numel() for p in mtp_params)
    log(f"params: trunk {n_trunk}, mtp {n_mtp}, total {n_trunk + n_mtp}")

    params = list(model.parameters()) + mtp_params
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=s["lr"], betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    T, B = s["seq"], s["batch"]
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda" or args.cpu_autocast)
    os.makedirs(args.out, exist_ok=True)
    curve = open(os.path.join(args.out, "train_curve.csv"), "w")
    curve.write("step,seconds,tokens,lr,loss,loss_mtp,loss_mtp_chain\n")
    t0 = time.time()
    step = 0
    hist_ce, hist_m = 0.0, 0.0
    while True:
        el = time.time() - t0
        if el >= args.seconds or step >= args.max_steps:
            break
        frac = min(1.0, el / args.seconds)
        lr = s["lr"] * min(1.0, (step + 1) / s["warmup"]) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, train.numel() - T - 2, (B,), device=dev)
        win = train[starts[:, None] + torch.arange(T + 2, device=dev)[None]]
        with amp:
            ce, cm, cm2 = losses(model, mtp, win)
            loss = ce + MTP_WEIGHT * cm + MTP_CHAIN_WEIGHT * cm2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step == 1:
            c, m, m2 = ce.item(), cm.item(), cm2.item()
            curve.write(f"{step},{time.time() - t0:.1f},{step * B * T},{lr:.3e},{c:.4f},{m:.4f},{m2:.4f}\n")
            curve.flush()
            if step % 100 == 0 or step == 1:
                log(f"step {step} t {time.time() - t0:.0f}s lr {lr:.2e} loss {c:.3f} mtp {m:.3f} chain {m2:.3f}")
    train_s = time.time() - t0
    log(f"trained {step} steps, {step * B * T} tokens in {train_s:.0f}s")
    curve.close()

    # Evaluate what nextn will load: bf16-rounded weights, float32 math.
    model.eval()
    mtp.eval()
    with torch.no_grad():
        for p in list(model.parameters()) + mtp_params:
            p.copy_(p.to(torch.bfloat16).float())
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    t1 = time.time()
    h_ce, h_m, h_m2, h_tok = heldout_losses(model, mtp, held, T, B)
    log(f"held-out: loss {h_ce:.4f} mtp {h_m:.4f} chain {h_m2:.4f} over {h_tok} tokens ({time.time() - t1:.0f}s)")
    positions = list(range(32, T - 8, max(8, (T - 40) // 14)))
    acc = chain_acceptance(model, mtp, held, T, args.acc_seqs, 3, positions)
    log(f"chain acceptance: {acc} ({time.time() - t1:.0f}s)")

    ck = os.path.join(args.out, "model")
    model.to(torch.bfloat16)
    mtp.to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos, do_sample=False)
    save_checkpoint(model, mtp, cfg, args.data, ck, args.shard)
    result = {
        "size": args.size, "config": s, "params_trunk": n_trunk, "params_mtp": n_mtp,
        "params_total": n_trunk + n_mtp, "mtp_loss_weight": MTP_WEIGHT,
        "steps": step, "tokens": step * B * T, "train_seconds": round(train_s, 1),
        "final_train_loss_last100": None, "heldout_loss": h_ce, "heldout_loss_mtp": h_m, "heldout_loss_mtp_chain": h_m2,
        "mtp_chain_loss_weight": MTP_CHAIN_WEIGHT,
        "heldout_tokens": h_tok, "acceptance": acc, "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
    }
    rows = [l.split(",") for l in open(os.path.join(args.out, "train_curve.csv")).read().split("\n")[1:] if l]
    tail = rows[-4:]
    result["final_train_loss_last100"] = sum(float(r[4]) for r in tail) / len(tail)
    result["final_train_loss_mtp_last100"] = sum(float(r[5]) for r in tail) / len(tail)
    result["final_train_loss_mtp_chain_last100"] = sum(float(r[6]) for r in tail) / len(tail)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    log(json.dumps(result))


if __name__ == "__main__":
    main()
