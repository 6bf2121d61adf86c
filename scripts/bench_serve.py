#!/usr/bin/env python3
"""Streaming throughput of `nextn serve` over plain HTTP (the standard library: the device has no openai package).

For each drafter and each concurrency S, starts `nextn serve --port 0
--max-batch B` (B = --max-batch, or S when not given, so that all S streams
generate at once), warms it with one request (for --draft oracle, the one that runs the
greedy truth every timed stream then replays: they all send the same prompt), then runs `reps` x S greedy
streams of `-n` tokens (ignore_eos) from S client threads. Prints the total
tokens/s (all tokens over the wall time), the mean per-stream tokens/s (each
stream's tokens over its own duration, queueing included), the mean time to
the first token, how many requests the engine's steps served on average
(nextn_step_sequences from /metrics; 1.0: no step was shared), and the
LM-head and MTP draft launches per step (1.0 head launch per step: the
head ran once for all the step's requests).

    scripts/bench_serve.py [--nextn build/nextn] [--streams 1,4,16,32] [--drafts none,mtp,mtp:3,oracle] [-n 64] [--reps 1]
                           [--oracle-rates 0.9,0.8,0.7] [--oracle-cost mtp|free]
                           [--max-batch B] [--threads T] [--model DIR] [--backend cpu|cuda] [--json out.json]
                           [--prompt TEXT | --prompt-ids 1,2,3]

--prompt-ids sends the prompt as token ids (a checkpoint without a tokenizer,
as `nextn make-checkpoint` writes; scripts/device/serve_table.sh uses it).
"""
import argparse
import concurrent.futures
import http.client
import json
import re
import subprocess
import time
import urllib.request


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def run(args, spec, streams):
    draft, _, block = spec.partition(":")
    max_batch = args.max_batch or streams
    cmd = [args.nextn, "serve", "--port", "0", "--draft", draft, "--max-batch", str(max_batch),
           "--queue-depth", str(max(16, streams))]
    if block:
        cmd += ["--block-size", block]
    if draft == "oracle":
        cmd += ["--accept-rates", args.oracle_rates, "--draft-cost", args.oracle_cost]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.model:
        cmd += ["--model", args.model, "--served-model-name", "default"]
    cmd += ["--backend", args.backend]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        port = re.search(r":(\d+)$", proc.stderr.readline().strip()).group(1)
        prompt = [int(t) for t in args.prompt_ids.split(",")] if args.prompt_ids else args.prompt
        body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": args.n, "temperature": 0,
                           "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}})

        def one(_):
            """One greedy stream: (completion tokens from the usage chunk, seconds, seconds to the first text)."""
            t0, tokens, first = time.time(), 0, None
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=3600)
            try:
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
                for line in r:  # server-sent events, one `data:` line each
                    line = line.strip()
                    if not line.startswith(b"data: "):
                        continue
                    if line == b"data: [DONE]":
                        break
                    ev = json.loads(line[6:])
                    if first is None and ev.get("choices") and ev["choices"][0].get("text"):
                        first = time.time() - t0
                    if ev.get("usage"):
                        tokens = ev["usage"]["completion_tokens"]
            finally:
                conn.close()
            return tokens, time.time() - t0, first or 0.0
        one(0)
        before = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(streams) as pool:
            results = list(pool.map(one, range(streams * args.reps)))
        wall = time.time() - t0
        after = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        total = sum(r[0] for r in results)
        per_stream = sum(r[0] / r[1] for r in results) / len(results)
        ttft = sum(r[2] for r in results) / len(results)
        def delta(name):
            return metric(after, name) - metric(before, name)
        steps = delta("nextn_step_sequences_count")
        served = delta("nextn_step_sequences_sum")
        chosen = delta("nextn_block_size_chosen_count")
        row = {"draft": spec, "streams": streams, "max_batch": max_batch, "tokens": total, "wall_s": wall,
               "total_tokens_per_s": total / wall, "per_stream_tokens_per_s": per_stream, "mean_ttft_s": ttft,
               "engine_steps": steps, "requests_per_step": served / steps if steps else 0.0,
               "lm_head_launches_per_step": delta("nextn_lm_head_launches_total") / steps if steps else 0.0,
               "mtp_draft_launches_per_step": delta("nextn_mtp_draft_launches_total") / steps if steps else 0.0,
               "mean_block_size_chosen": delta("nextn_block_size_chosen_sum") / chosen if chosen else 0.0,
               "acceptance": delta("nextn_accepted_tokens_total") / max(1.0, delta("nextn_drafted_tokens_total")),
               "tokens_per_round": (delta("nextn_completion_tokens_total") - len(results))
                                   / max(1.0, delta("nextn_rounds_total")),
               "oracle_truths_run_timed": delta("nextn_oracle_truths_run_total")}
        print(f"draft {spec:8s} streams {streams:2d} max-batch {max_batch:2d}: total {total / wall:7.1f} tok/s, "
              f"per stream {per_stream:6.1f} tok/s, first token {ttft * 1000:6.0f} ms, "
              f"{row['requests_per_step']:4.1f} requests per step, {row['lm_head_launches_per_step']:4.1f} head "
              f"launches per step, mean K {row['mean_block_size_chosen']:.2f}, {row['tokens_per_round']:.2f} tokens per round "
              f"({len(results)} streams of {args.n} tokens)", flush=True)
        return row
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nextn", default="build/nextn")
    ap.add_argument("--streams", default="1,4,16,32")
    ap.add_argument("--drafts", default="none,mtp",
                    help="serve --draft values, each optionally :K for a fixed --block-size (default: auto)")
    ap.add_argument("--oracle-rates", default="0.9,0.8,0.7", help="--draft oracle: serve --accept-rates")
    ap.add_argument("--oracle-cost", default="mtp", help="--draft oracle: serve --draft-cost")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=0, help="serve --max-batch (default: the stream count)")
    ap.add_argument("--threads", type=int, default=0, help="serve --threads (default: serve's)")
    ap.add_argument("--model", help="serve --model (default: serve's)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--prompt", default="def fibonacci(n):")
    ap.add_argument("--prompt-ids", help="comma-separated token ids instead of --prompt")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    rows = [run(args, draft, int(streams)) for draft in args.drafts.split(",") for streams in args.streams.split(",")]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
