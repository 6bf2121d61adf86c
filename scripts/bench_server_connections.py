#!/usr/bin/env python3
"""/health and /metrics latency of `nextn serve` under many connections (issue 22).

Case "idle+streams": N idle connections (a third send nothing, a third
half a request's headers, a third the headers and half a body), S concurrent
greedy streams (ignore_eos, a fixed max_tokens); while both are on, R probes
of /health and R of /metrics, each on a fresh connection.
Case "half-sent": H connections with half-sent requests (the issue's case),
then R /health probes and one completion.

Reports median / p90 / p99 / max latency in ms per probe and case, whether
completions were still served (count, tokens/s), and checks each probe
against the target (default 100 ms). Starts the server itself (the binary's
default model) unless --base names a running one. Standard library only.

    scripts/bench_server_connections.py [--nextn build/nextn] [--base http://127.0.0.1:8000]
        [--idle 1000] [--streams 64] [--probes 50] [--half-sent 64] [--max-tokens 64]
        [--out-md FILE] [--out-json FILE] [--check]

Exits 1 with --check when a probe misses the target, or a case served no completion.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from http_util import Conn, HttpError, Server, chunk_text, request_bytes, simple_get, sse_data  # noqa: E402

PROMPT = "def fibonacci(n):"


def percentile(xs, q):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def machine_state(nextn):
    """nproc, load average, and the commit: the binary's build stamp (printed by `nextn bench`)
    and the source tree's HEAD and dirty state."""
    st = {"nproc": len(os.sched_getaffinity(0)), "loadavg": list(os.getloadavg())}
    if nextn:
        try:
            out = subprocess.run([nextn, "bench", "decode", "--prompt-len", "4", "-n", "2", "--repeats", "1", "--json"],
                                 capture_output=True, text=True, timeout=120).stdout
            m = json.loads(out)["machine"]
            st["binary_commit"] = m.get("commit")
            st["binary_commit_source"] = m.get("commit_source")
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            st["binary_commit"] = f"unknown ({type(e).__name__})"
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    st["tree_head"] = git("rev-parse", "HEAD")
    st["tree_dirty"] = bool(git("status", "--porcelain", "--untracked-files=no"))
    return st


class Bench:
    def __init__(self, host, port, args):
        self.host, self.port, self.a = host, port, args

    def conn(self, timeout=None):
        return Conn(self.host, self.port, timeout or self.a.timeout)

    def completion_body(self, stream):
        return json.dumps({"model": self.a.model_name, "prompt": PROMPT, "max_tokens": self.a.max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": stream,
                           "stream_options": {"include_usage": True}} if stream else
                          {"model": self.a.model_name, "prompt": PROMPT, "max_tokens": self.a.max_tokens,
                           "temperature": 0, "ignore_eos": True}).encode()

    def idle(self, n, with_body):
        """n connections left idle: nothing sent, half the headers, or (with_body) headers and half a body."""
        conns, failed = [], 0
        req = request_bytes("POST", "/v1/completions", self.completion_body(False))
        head_end = req.index(b"\r\n\r\n") + 4
        for i in range(n):
            try:
                c = self.conn()
                part = i % 3 if with_body else 2
                if part == 1:
                    c.send(req[:head_end // 2])
                elif part == 2:
                    c.send(req[:head_end + (len(req) - head_end) // 2])
                conns.append(c)
            except OSError:
                failed += 1
        return conns, failed

    @staticmethod
    def still_open(conns):
        """How many of conns the server has not closed (a non-blocking peek sees no EOF)."""
        n = 0
        for c in conns:
            try:
                c.sock.setblocking(False)
                n += c.sock.recv(1, 0x2) != b""  # MSG_PEEK
            except BlockingIOError:
                n += 1
            except OSError:
                pass
        return n

    def probe(self, path):
        """Latency in ms of one GET on a fresh connection; None when it failed or timed out."""
        try:
            status, _, took = simple_get(self.host, self.port, path, timeout=self.a.timeout)
            return took * 1000 if status == 200 else None
        except (OSError, HttpError):
            return None

    def probes(self, paths, budget_s):
        out = {p: [] for p in paths}
        end = time.monotonic() + budget_s
        for _ in range(self.a.probes):
            for p in paths:
                out[p].append(self.probe(p) if time.monotonic() < end else None)
            time.sleep(self.a.probe_gap)
        return out

    def stream(self, results):
        t0 = time.monotonic()
        try:
            c = self.conn(self.a.stream_timeout)  # a stream may wait its turn in the queue
            c.send(request_bytes("POST", "/v1/completions", self.completion_body(True)))
            status, headers = c.read_head()
            tokens, done = 0, False
            if status == 200:
                for data in sse_data(c.iter_body(headers)):
                    if data == b"[DONE]":
                        done = True
                        break
                    obj = json.loads(data)
                    if obj.get("usage"):
                        tokens = obj["usage"]["completion_tokens"]
                    chunk_text(obj)
            c.close()
            results.append((status == 200 and done, tokens, t0, time.monotonic()))
        except (OSError, HttpError, ValueError):
            results.append((False, 0, t0, time.monotonic()))

    def completion(self):
        """(served whole, seconds) of one non-streamed completion."""
        t0 = time.monotonic()
        try:
            c = self.conn(self.a.stream_timeout)
            c.send(request_bytes("POST", "/v1/completions", self.completion_body(False)))
            status, _, body = c.read_response()
            c.close()
            return status == 200 and bool(json.loads(body).get("choices")), time.monotonic() - t0
        except (OSError, HttpError, ValueError):
            return False, time.monotonic() - t0


def summarize(lat, target_ms):
    ok = [x for x in lat if x is not None]
    row = {"n": len(lat), "failed": len(lat) - len(ok)}
    if ok:
        row.update(median_ms=statistics.median(ok), p90_ms=percentile(ok, 90), p99_ms=percentile(ok, 99),
                   max_ms=max(ok))
    row["pass"] = bool(ok) and row["failed"] == 0 and row["max_ms"] <= target_ms
    return row


def case_idle_streams(b, a):
    idle, idle_failed = b.idle(a.idle, with_body=True)
    results = []
    streams = [threading.Thread(target=b.stream, args=(results,)) for _ in range(a.streams)]
    t0 = time.monotonic()
    for t in streams:
        t.start()
    time.sleep(a.settle)  # the streams are admitted and generating
    lat = b.probes(["/health", "/metrics"], a.probe_budget)
    open_after = b.still_open(idle)
    running_after = sum(t.is_alive() for t in streams)
    for t in streams:
        t.join()
    wall = max((r[3] for r in results), default=t0) - t0
    for c in idle:
        c.close()
    done = [r for r in results if r[0]]
    tokens = sum(r[1] for r in done)
    return {"case": "idle+streams", "idle_requested": a.idle, "idle_open_failed": idle_failed,
            "idle_still_open_after_probes": open_after, "streams": a.streams,
            "streams_running_after_probes": running_after, "completions_served": len(done),
            "tokens": tokens, "tokens_per_s": tokens / wall if wall > 0 else 0.0, "wall_s": wall,
            "probes": {p: summarize(v, a.target_ms) for p, v in lat.items()}}


def case_half_sent(b, a):
    half, failed = b.idle(a.half_sent, with_body=False)
    time.sleep(a.settle)
    lat = b.probes(["/health"], a.probe_budget)
    served, took = b.completion()
    open_after = b.still_open(half)
    for c in half:
        c.close()
    return {"case": "half-sent", "half_sent": a.half_sent, "open_failed": failed,
            "half_sent_still_open_after_probes": open_after, "completions_served": int(served),
            "completion_s": took, "probes": {p: summarize(v, a.target_ms) for p, v in lat.items()}}


def markdown(summary, target_ms):
    m = summary["machine"]
    lines = [f"nextn serve connection benchmark: nproc {m['nproc']}, load average "
             f"{' '.join(f'{x:.2f}' for x in m['loadavg'])} at start, binary commit {m.get('binary_commit', '-')}, "
             f"tree {m['tree_head'][:12]}{' (dirty)' if m['tree_dirty'] else ''}", "",
             f"| case | probe | n | failed | median ms | p90 ms | p99 ms | max ms | target {target_ms:g} ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda r, k: f"{r[k]:.1f}" if k in r else "-"  # noqa: E731
    for c in summary["cases"]:
        for p, r in c["probes"].items():
            lines.append(f"| {c['case']} | {p} | {r['n']} | {r['failed']} | {fmt(r, 'median_ms')} | {fmt(r, 'p90_ms')} "
                         f"| {fmt(r, 'p99_ms')} | {fmt(r, 'max_ms')} | {'pass' if r['pass'] else 'FAIL'} |")
    lines.append("")
    for c in summary["cases"]:
        if c["case"] == "idle+streams":
            lines.append(f"- idle+streams: {c['idle_requested']} idle connections ({c['idle_open_failed']} failed to "
                         f"open, {c['idle_still_open_after_probes']} still open after the probes); {c['streams']} "
                         f"streams: {c['completions_served']} served whole, {c['tokens']} tokens, "
                         f"{c['tokens_per_s']:.0f} tokens/s over {c['wall_s']:.1f} s, "
                         f"{c['streams_running_after_probes']} still running when the probes ended")
        else:
            lines.append(f"- half-sent: {c['half_sent']} half-sent requests ({c['half_sent_still_open_after_probes']} "
                         f"still open after the probes); a completion {'served' if c['completions_served'] else 'NOT served'}"
                         f" in {c['completion_s']:.2f} s")
    for cmd in summary.get("servers", []):
        lines.append(f"- server: `nextn {cmd}`")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nextn", default=os.path.join(ROOT, "build", "nextn"))
    ap.add_argument("--base", help="a running server, e.g. http://127.0.0.1:8000 (else one is started)")
    ap.add_argument("--model-name", default="default", help="the served model id")
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--half-sent", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--target-ms", type=float, default=100)
    ap.add_argument("--timeout", type=float, default=10, help="seconds one probe may take")
    ap.add_argument("--stream-timeout", type=float, default=120, help="seconds a completion may wait for a byte")
    ap.add_argument("--probe-budget", type=float, default=60, help="seconds a case may spend probing")
    ap.add_argument("--probe-gap", type=float, default=0.02)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds between opening the load and probing")
    ap.add_argument("--out-md")
    ap.add_argument("--out-json")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()

    # The client holds N + S + probes sockets; the server's own limit stays what it inherits
    # (it raises it itself), so the child gets the original soft limit back.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    summary = {"machine": machine_state(None if a.base else a.nextn), "target_ms": a.target_ms, "cases": [],
               "servers": []}
    # Without --base each case gets a fresh server: the streams case one with a queue for every
    # stream, the half-sent case one with the default flags (as the issue found it).
    cases = [(case_idle_streams, ["--queue-depth", str(a.streams), "--max-batch", "8"]), (case_half_sent, [])]
    for case, flags in cases:
        server = None
        try:
            if a.base:
                u = urllib.parse.urlparse(a.base)
                host, port = u.hostname, u.port or 80
            else:
                server = Server(a.nextn, flags + ["--max-tokens", str(a.max_tokens)],
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
                host, port = server.host, server.port
                summary["servers"].append(" ".join(server.argv[1:]))
            b = Bench(host, port, a)
            b.completion()  # warm-up
            summary["cases"].append(case(b, a))
        finally:
            if server:
                server.terminate(30)
    summary["machine"]["loadavg_end"] = list(os.getloadavg())
    md = markdown(summary, a.target_ms)
    print(md, end="")
    if a.out_md:
        with open(a.out_md, "w") as f:
            f.write(md)
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump(summary, f, indent=1)
    ok = all(r["pass"] for c in summary["cases"] for r in c["probes"].values()) and \
        all(c["completions_served"] > 0 for c in summary["cases"])
    print("target: " + ("met" if ok else "MISSED"))
    return 1 if a.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
