#!/usr/bin/env python3
"""Streaming throughput of `nextn serve` through the official openai client.

For each drafter and each concurrency, starts `nextn serve --port 0`, warms it
with one request, then runs `reps` x `streams` greedy streams of `-n` tokens
(ignore_eos) from `streams` client threads and prints the total tokens/s
(all tokens over the wall time) and the mean per-stream tokens/s (each
stream's tokens over its own duration, queueing included: the engine runs one
request at a time).

    scripts/bench_serve.py [--nextn build/nextn] [--streams 1,8] [--drafts none,mtp] [-n 128] [--reps 2]
"""
import argparse
import concurrent.futures
import re
import subprocess
import time

import openai


def run(args, draft, streams):
    proc = subprocess.Popen([args.nextn, "serve", "--port", "0", "--draft", draft], stderr=subprocess.PIPE, text=True)
    try:
        port = re.search(r":(\d+)$", proc.stderr.readline().strip()).group(1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)

        def one(_):
            t0, tokens = time.time(), 0
            for chunk in client.completions.create(model="default", prompt=args.prompt, max_tokens=args.n,
                                                   temperature=0, stream=True, extra_body={"ignore_eos": True},
                                                   stream_options={"include_usage": True}):
                if chunk.usage:
                    tokens = chunk.usage.completion_tokens
            return tokens, time.time() - t0
        one(0)
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(streams) as pool:
            results = list(pool.map(one, range(streams * args.reps)))
        wall = time.time() - t0
        total = sum(r[0] for r in results)
        per_stream = sum(r[0] / r[1] for r in results) / len(results)
        print(f"draft {draft:4s} streams {streams:2d}: total {total / wall:6.1f} tok/s, "
              f"per stream {per_stream:6.1f} tok/s ({len(results)} streams of {args.n} tokens)")
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nextn", default="build/nextn")
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--drafts", default="none,mtp")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--prompt", default="def fibonacci(n):")
    args = ap.parse_args()
    for draft in args.drafts.split(","):
        for streams in args.streams.split(","):
            run(args, draft, int(streams))


if __name__ == "__main__":
    main()
