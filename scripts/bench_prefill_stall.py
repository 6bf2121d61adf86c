#!/usr/bin/env python3
"""What a long prompt's arrival costs the streams already running (issue 23's chunked-prefill benchmark).

Starts `nextn serve --max-batch S+1 --prefill-chunk C` for each C in --chunks,
runs S greedy streams of -n tokens (ignore_eos, token ids as the prompt), and,
once the streams have received --lead text events each on average, sends one
request whose prompt is --long-prompt token ids. Every streamed text event of
the S streams is timestamped; a gap is the time between two consecutive
events of one stream (a token whose text is held back, part of a UTF-8
sequence, arrives with the next one: that gap spans both, an upper bound).
Prints per chunk size: the median gap before the long prompt was sent, the
median, p99 and largest gap from its send to its first token (the window in
which its chunks share the steps), p99 / median, and the long prompt's time to
first token. Standard library only (the GPU machine has no openai package).

    scripts/bench_prefill_stall.py --nextn build/nextn --model DIR [--backend cuda] [--streams 16]
        [--chunks 512,4096] [--long-prompt 4096] [-n 192] [--lead 24] [--json out.json]
"""
import argparse
import http.client
import json
import shlex
import re
import statistics
import subprocess
import sys
import threading
import time


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return 0.0
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[k]


def stream(port, prompt, n, stamps, first_at=None, errors=None):
    """One greedy stream; appends the time of every event that carries text to `stamps`.
    With `errors`, an exception is appended there instead of raised (a thread's)."""
    try:
        stream_events(port, prompt, n, stamps, first_at)
    except Exception as e:  # noqa: BLE001 - reported by the caller
        if errors is None:
            raise
        errors.append(repr(e))


def stream_events(port, prompt, n, stamps, first_at):
    body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                break
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0].get("text"):
                stamps.append(time.time())
                if first_at is not None and len(stamps) == 1:
                    first_at.append(stamps[0])
    finally:
        conn.close()


def run(args, chunk):
    cmd = [args.nextn, "serve", "--port", "0", "--draft", "none", "--max-batch", str(args.streams + 1),
           "--max-tokens", str(args.n),
           "--queue-depth", str(args.streams + 4), "--prefill-chunk", str(chunk), "--backend", args.backend,
           "--max-prompt-tokens", str(max(2048, args.long_prompt))]
    if args.model:
        cmd += ["--model", args.model, "--served-model-name", "default"]
    cmd += shlex.split(args.serve_args)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        first_line = proc.stderr.readline().strip()
        found = re.search(r":(\d+)$", first_line)
        if not found:
            raise RuntimeError(f"nextn serve did not start: {first_line}")
        port = int(found.group(1))
        # The server's later lines (errors, if any) go to this script's stderr.
        threading.Thread(target=lambda: [print(l, end="", file=sys.stderr) for l in proc.stderr], daemon=True).start()
        short = [11 + i for i in range(16)]
        long_prompt = [11 + (i * 7919) % 8000 for i in range(args.long_prompt)]
        stream(port, short, 8, [])  # warm-up: graphs for one sequence
        stream(port, long_prompt, 2, [])  # and the prefill path once (its workspace, kernels)
        stamps = [[] for _ in range(args.streams)]
        errors = []
        threads = [threading.Thread(target=stream, args=(port, [11 + (s * 31 + i) % 8000 for i in range(16)], args.n,
                                                          stamps[s], None, errors)) for s in range(args.streams)]
        for t in threads:
            t.start()
        deadline = time.time() + args.timeout
        # Text events, not tokens: a token whose text is held back (part of a
        # UTF-8 sequence) arrives with the next, so a stream may show fewer
        # events than tokens and its gap then spans both (an upper bound).
        while sum(len(s) for s in stamps) < args.lead * args.streams:
            if errors or time.time() > deadline:
                raise RuntimeError(f"the streams did not reach {args.lead} events each on average: "
                                   f"{errors or 'timed out'} (events so far: {[len(s) for s in stamps]})")
            time.sleep(0.002)
        first = []
        sent = time.time()
        stream(port, long_prompt, 4, [], first)
        for t in threads:
            t.join(max(1.0, deadline - time.time()))
        if errors or any(t.is_alive() for t in threads):
            raise RuntimeError(f"a stream failed or did not finish: {errors or 'timed out'}")
        ttft = first[0] - sent if first else 0.0
        end = first[0] if first else sent
        before, during = [], []
        for s in stamps:
            for a, b in zip(s, s[1:]):
                if b <= sent:
                    before.append(b - a)
                elif b <= end + 1e-3 and a < end:
                    during.append(b - a)
        med = statistics.median(before) if before else 0.0
        row = {"prefill_chunk": chunk, "streams": args.streams, "long_prompt_tokens": args.long_prompt,
               "median_gap_before_ms": med * 1e3,
               "median_gap_during_ms": (statistics.median(during) if during else 0.0) * 1e3,
               "p99_gap_during_ms": percentile(during, 0.99) * 1e3, "max_gap_during_ms": max(during, default=0) * 1e3,
               "p99_over_median": percentile(during, 0.99) / med if med else 0.0, "gaps_before": len(before),
               "gaps_during": len(during), "long_prompt_ttft_ms": ttft * 1e3}
        print(f"prefill-chunk {chunk:5d}: {args.streams} streams, median gap {row['median_gap_before_ms']:.1f} ms "
              f"before; while a {args.long_prompt}-token prompt arrives: median {row['median_gap_during_ms']:.1f} ms, "
              f"p99 {row['p99_gap_during_ms']:.1f} ms, max {row['max_gap_during_ms']:.1f} ms "
              f"(p99 / median before {row['p99_over_median']:.2f}, {len(during)} gaps); its first token after "
              f"{row['long_prompt_ttft_ms']:.0f} ms", flush=True)
        return row
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nextn", default="build/nextn")
    ap.add_argument("--model")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--chunks", default="512,4096")
    ap.add_argument("--long-prompt", type=int, default=4096)
    ap.add_argument("-n", type=int, default=192)
    ap.add_argument("--lead", type=int, default=24, help="tokens every stream has before the long prompt is sent")
    ap.add_argument("--timeout", type=float, default=120, help="seconds the streams may take per chunk size")
    ap.add_argument("--json")
    ap.add_argument("--serve-args", default="", help="more `nextn serve` arguments, e.g. --log-steps")
    args = ap.parse_args()
    rows = [run(args, int(c)) for c in args.chunks.split(",")]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
