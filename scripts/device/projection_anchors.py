#!/usr/bin/env python3
"""Anchors for `nextn bench projection`, timed in the same GPU run: PyTorch's
int4 tinygemm (_weight_int4pack_mm, group 128) and cuBLAS bf16 (torch.matmul)
on the LM head shape, weights rotated over copies so L2 never serves a
repeat; timed as nextn's bench times its own kernel: a CUDA graph of 10
calls (rotating the copies) replayed, CUDA events around each replay, the
median replay time / 10. Prints one JSON object."""
import argparse, json, statistics, sys
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="248320x5120")
ap.add_argument("--widths", default="1,2,3,4,5,6,8,12,16,24,32")
ap.add_argument("--repeats", type=int, default=20)
a = ap.parse_args()
N, K = map(int, a.shape.split("x"))
widths = [int(w) for w in a.widths.split(",")]
dev = "cuda"
torch.manual_seed(0)

GRAPH_CALLS = 10

def timeit(fn, n_copies):
    for i in range(3):
        fn(i % n_copies)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            for i in range(GRAPH_CALLS):
                fn(i % n_copies)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.repeats):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); g.replay(); e1.record(); e1.synchronize()
        ts.append(e0.elapsed_time(e1) / GRAPH_CALLS)
    return statistics.median(ts)

out = {"shape": a.shape, "torch": torch.__version__, "tinygemm_ms": {}, "bf16_ms": {}}
# int4 tinygemm, group 128, inner_k_tiles 8
try:
    copies = []
    for c in range(2):
        q = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=dev)
        packed = torch.ops.aten._convert_weight_to_int4pack(q, 8)
        sz = (torch.randn(K // 128, N, 2, device=dev) * 0.01).to(torch.bfloat16)
        copies.append((packed, sz))
    for W in widths:
        x = torch.randn(W, K, device=dev, dtype=torch.bfloat16)
        out["tinygemm_ms"][W] = timeit(lambda i: torch.ops.aten._weight_int4pack_mm(x, copies[i][0], 128, copies[i][1]), 2)
    del copies
except Exception as e:  # record, keep going
    out["tinygemm_error"] = repr(e)
torch.cuda.empty_cache()
try:
    ws = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.01 for _ in range(2)]
    for W in widths:
        x = torch.randn(W, K, device=dev, dtype=torch.bfloat16)
        out["bf16_ms"][W] = timeit(lambda i: torch.matmul(x, ws[i].t()), 2)
    del ws
except Exception as e:
    out["bf16_error"] = repr(e)
print(json.dumps(out))
