#!/usr/bin/env python3
"""Soak test of `nextn serve` against hostile and slow clients (issue 22), on loopback.

Starts `nextn serve --port 0` on the default model, takes every prompt's
answer in a quiet reference pass, warms up at full concurrency, takes a
baseline of the server's resident memory, open file descriptors and threads,
then runs --requests requests from --clients threads: well-formed
completions and chat (greedy, and seeded sampling; streamed and not, some two
on one keep-alive connection), mixed with cancels (a stream closed after its
first event), disconnects mid-stream (FIN or RST), mid-request (half a body)
and while a non-streamed answer is computed, malformed bodies, slow senders
that complete (answered) and slow senders that stop (dropped by the server).

Every well-formed request must get its whole answer, equal byte for byte to
its reference, or a clean OpenAI-style JSON error; a 429 is a failure (the
queue holds every client). Afterwards the server still answers /health and a
completion, its memory, descriptors and threads are back within the bounds
below, and SIGTERM during a stream lets the stream finish and exits 0 within
the drain timeout. Prints a summary by kind and outcome; exits 1 on any
failure.

    tests/server/soak.py --nextn build/nextn [--requests 2000] [--clients 64] [--sanitized]

"""
import argparse
import collections
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_util import Conn, HttpError, Server, chunk_text, is_error_json, metric_sum, parse_metrics  # noqa: E402
from http_util import request_bytes, simple_get, sse_data  # noqa: E402

HEADER_TIMEOUT, BODY_TIMEOUT, IDLE_TIMEOUT, DRAIN_TIMEOUT = 4, 8, 5, 20
MAX_TOKENS = 64  # the server's --max-tokens; the mix asks 4 or 8
# Bounds after the soak against the baseline taken after warm-up (which ran the
# same mix at the same concurrency, so pools, arenas and caches are already
# at their working size):
# - descriptors: +4 (a probe connection or two still closing); a connection
#   leaked per request would be hundreds.
# - threads: +4 (an engine job thread still winding down); a leaked thread per
#   request would be hundreds.
# - RSS: +48 MiB. glibc keeps freed memory in up to 8 x cores malloc arenas,
#   each at the high-water mark of the threads that used it, so a warm server
#   still moves by tens of MiB with which thread served what; a leak of one
#   request's prompt, token and JSON buffers (~20 KiB) over 2,000 requests
#   alone is ~40 MiB, and of its KV slot or a stream's buffers far more.
#   Not checked with --sanitized (ASan's quarantine holds freed memory).
FD_SLACK, THREAD_SLACK, RSS_SLACK_KIB = 4, 4, 48 * 1024
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:", "for i in range(", "x = [", "# sort a list\n",
           "def main():\n", "while True:", "print(", "return ", "if __name__ == ", "SELECT * FROM"]
CHATS = ["Write a sort.", "Say hello.", "Add two numbers.", "What is a list?"]
# kind: weight. Well-formed kinds must be answered whole; the others check
# that the server copes and stays correct for everyone else.
MIX = {"completion": 26, "completion_stream": 18, "chat": 10, "chat_stream": 10, "keepalive_pair": 6,
       "cancel_stream": 7, "reset_stream": 4, "disconnect_waiting": 3, "disconnect_mid_body": 4,
       "malformed": 7, "slow_complete": 3, "slow_abandon_close": 1, "slow_abandon_open": 1}
MALFORMED = [b'{"prompt": "x", "max_tokens": 4', b'{"prompt": 5, "max_tokens": 4}', b'[1, 2, 3]', b'"just a string"',
             b'{"prompt": "x", "max_tokens": "four"}', b'{"prompt": "x", "max_tokens": -3}',
             b'{"prompt": "x", "temperature": "hot"}', b'{"messages": "hello"}', b'\xff\xfe not utf-8',
             b'{"prompt": "x", "stream": "yes"}', b'{"max_tokens": 4}', b'']

ARGS = None
MODEL = "default"  # the served id, from /v1/models


class Soak:
    def __init__(self, server):
        self.s = server
        self.refs = {}  # variant -> its reference text
        self.outcomes = collections.Counter()
        self.failures = []
        self.lock = threading.Lock()
        self.abandoned_open = 0
        self.by_endpoint = collections.defaultdict(list)
        for v in self.variants():
            self.by_endpoint[v[0]].append(v)

    def fail(self, what):
        with self.lock:
            self.failures.append(what)

    def count(self, kind, outcome):
        with self.lock:
            self.outcomes[(kind, outcome)] += 1

    def conn(self):
        return Conn(self.s.host, self.s.port, ARGS.client_timeout)

    @staticmethod
    def body(variant, stream):
        endpoint, prompt, max_tokens, seed = variant
        b = {"model": MODEL, "max_tokens": max_tokens, "stream": stream}
        b.update({"temperature": 0} if seed is None else {"temperature": 0.8, "seed": seed})
        if endpoint == "chat":
            b["messages"] = [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        return json.dumps(b).encode()

    @staticmethod
    def path(variant):
        return "/v1/chat/completions" if variant[0] == "chat" else "/v1/completions"

    def variants(self):
        v = [("completion", p, n, None) for p in PROMPTS for n in (4, 8)]
        v += [("chat", p, n, None) for p in CHATS for n in (4, 8)]
        v += [("completion", p, 8, seed) for p, seed in zip(PROMPTS[:4], (7, 8, 9, 10))]
        return v

    def read_whole(self, c, stream):
        """(text, None) for a whole answer; (None, outcome) for a clean error; raises on anything else."""
        status, headers = c.read_head()
        if status != 200:
            body = b"".join(c.iter_body(headers))
            if status == 429:
                return None, "429"
            return None, f"error_{status}" if is_error_json(body) else f"bad_error_body_{status}"
        if not stream:
            return chunk_text(json.loads(b"".join(c.iter_body(headers)))), None
        text, done, error = [], False, None
        for data in sse_data(c.iter_body(headers)):
            if data == b"[DONE]":
                done = True
                break
            obj = json.loads(data)
            if "error" in obj:
                error = "stream_error" if is_error_json(data) else "bad_stream_error"
            else:
                text.append(chunk_text(obj))
        if not done:
            return None, "stream_cut"
        return (None, error) if error else ("".join(text), None)

    def judge(self, kind, variant, text, outcome):
        if outcome is None:
            if text == self.refs[variant]:
                self.count(kind, "ok")
            else:
                self.count(kind, "MISMATCH")
                self.fail(f"{kind} {variant}: {text!r} != reference {self.refs[variant]!r}")
        else:
            # A clean server-side error (5xx JSON, or an error event on a stream) is allowed;
            # a 4xx for a well-formed request, a 429 included, is a failure.
            self.count(kind, outcome)
            if not outcome.startswith(("error_5", "stream_error")):
                self.fail(f"{kind} {variant}: {outcome}")

    def one(self, kind, rng):
        if kind.startswith(("completion", "chat")):
            variant = rng.choice(self.by_endpoint["chat" if kind.startswith("chat") else "completion"])
        else:
            variant = rng.choice(self.by_endpoint["chat"] + self.by_endpoint["completion"])
        stream = kind.endswith("_stream")
        req = request_bytes("POST", self.path(variant), self.body(variant, stream))
        if kind in ("completion", "completion_stream", "chat", "chat_stream"):
            c = self.conn()
            try:
                c.send(req)
                self.judge(kind, variant, *self.read_whole(c, stream))
            finally:
                c.close()
        elif kind == "keepalive_pair":
            c = self.conn()
            try:
                for i in range(2):
                    v = rng.choice(self.by_endpoint["completion"] + self.by_endpoint["chat"])
                    c.send(request_bytes("POST", self.path(v), self.body(v, i == 1), keep_alive=i == 0))
                    self.judge(kind, v, *self.read_whole(c, i == 1))
            finally:
                c.close()
        elif kind in ("cancel_stream", "reset_stream"):
            c = self.conn()
            try:
                c.send(req)
                status, headers = c.read_head()
                if status != 200:
                    self.judge(kind, variant, None, "429" if status == 429 else f"error_{status}")
                    return
                # What arrived before the close must be a prefix of the reference.
                got, keep = [], rng.randint(1, 3)
                for data in sse_data(c.iter_body(headers)):
                    if data == b"[DONE]":
                        break
                    got.append(chunk_text(json.loads(data)))
                    if len(got) >= keep:
                        break
                text = "".join(got)
                if self.refs[variant].startswith(text):
                    self.count(kind, "closed_early")
                else:
                    self.count(kind, "MISMATCH")
                    self.fail(f"{kind} {variant}: prefix {text!r} not in {self.refs[variant]!r}")
            finally:
                c.close(reset=kind == "reset_stream")
        elif kind == "disconnect_waiting":
            c = self.conn()
            c.send(req)
            time.sleep(rng.uniform(0, 0.2))
            c.close(reset=rng.random() < 0.5)
            self.count(kind, "closed_early")
        elif kind == "disconnect_mid_body":
            c = self.conn()
            c.send(req[:rng.randint(1, len(req) - 1)])
            time.sleep(rng.uniform(0, 0.2))
            c.close(reset=rng.random() < 0.5)
            self.count(kind, "closed_early")
        elif kind == "malformed":
            self.malformed(rng)
        else:
            self.slow(kind, variant, req, rng)

    def malformed(self, rng):
        i = rng.randrange(len(MALFORMED))
        path = "/v1/chat/completions" if MALFORMED[i].startswith(b'{"messages"') else "/v1/completions"
        c = self.conn()
        try:
            c.send(request_bytes("POST", path, MALFORMED[i]))
            status, _, body = c.read_response()
            if 400 <= status < 500 and status != 429 and is_error_json(body):
                self.count("malformed", f"error_{status}")
            else:
                self.count("malformed", f"BAD_{status}")
                self.fail(f"malformed body {MALFORMED[i]!r}: {status} {body[:200]!r}")
        finally:
            c.close()

    def slow(self, kind, variant, req, rng):
        """Headers, then the body, dribbled over 1-2 s in all; then completed, closed, or left open."""
        head_end = req.index(b"\r\n\r\n") + 4
        cut = len(req) if kind == "slow_complete" else rng.randint(1, len(req) - 1)
        step = max(1, cut // 12)
        pieces = [req[i:min(i + step, cut)] for i in range(0, cut, step)]  # never past the cut: an abandoned request stays partial
        spread = rng.uniform(1.0, 2.0)
        c = self.conn()
        try:
            sent = 0
            for p in pieces:
                c.send(p)
                sent += len(p)
                # Most of the time goes to the headers (the header timeout's case).
                time.sleep(spread / len(pieces) * (1.5 if sent <= head_end else 0.5))
            if kind == "slow_complete":
                self.judge(kind, variant, *self.read_whole(c, False))
            elif kind == "slow_abandon_close":
                self.count(kind, "closed_early")
            else:
                # The server must drop a client that stops sending: by the header
                # or the body timeout, plus slack for a loaded machine.
                with self.lock:
                    self.abandoned_open += 1
                if c.closed_by_peer(BODY_TIMEOUT + 5):
                    self.count(kind, "dropped_by_server")
                else:
                    self.count(kind, "NOT_DROPPED")
                    self.fail(f"{kind}: the server kept a stalled request open past {BODY_TIMEOUT + 5} s")
        finally:
            c.close()

    def run_mix(self, n, clients, seed):
        kinds = list(MIX)
        weights = [MIX[k] for k in kinds]
        plan = random.Random(seed).choices(kinds, weights, k=n)
        if n >= len(kinds):  # every kind at least once, also in a short run
            plan[:len(kinds)] = kinds
            random.Random(seed).shuffle(plan)
        next_i = iter(range(n))
        it_lock = threading.Lock()

        def worker(w):
            rng = random.Random(seed * 1000 + w)
            while True:
                with it_lock:
                    i = next(next_i, None)
                if i is None:
                    return
                try:
                    self.one(plan[i], rng)
                except Exception as e:  # noqa: BLE001 (a client-side surprise is a failure to report, not a crash)
                    self.count(plan[i], "CLIENT_ERROR")
                    self.fail(f"{plan[i]}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def health_monitor(self, stop, samples):
        """/health on a fresh connection every 0.5 s while the mix runs (liveness, not speed)."""
        while not stop.wait(0.5):
            try:
                status, _, took = simple_get(self.s.host, self.s.port, "/health", timeout=ARGS.client_timeout)
                samples.append((status, took))
            except (OSError, HttpError) as e:
                samples.append((str(e), ARGS.client_timeout))

    def stall_burst(self, n, delay, samples, result):
        """The issue's case inside the mix: n connections at once each send half a request's
        headers and stop. /health must still be answered while they hang, and the server must
        drop every one of them by its header timeout (plus slack)."""
        time.sleep(delay)
        req = request_bytes("POST", "/v1/completions", self.body(self.by_endpoint["completion"][0], False))
        conns = []
        for _ in range(n):
            c = self.conn()
            c.send(req[:req.index(b"\r\n\r\n") // 2])
            conns.append(c)
        with self.lock:
            self.abandoned_open += n
        for _ in range(5):
            try:
                status, _, took = simple_get(self.s.host, self.s.port, "/health", timeout=ARGS.client_timeout)
                samples.append((status, took))
            except (OSError, HttpError) as e:
                samples.append((str(e), ARGS.client_timeout))
            time.sleep(0.2)
        end = time.monotonic() + HEADER_TIMEOUT + 5
        result["kept_open"] = sum(not c.closed_by_peer(max(0.01, end - time.monotonic())) for c in conns)
        for c in conns:
            c.close()


def settle(server, baseline, seconds):
    """Polls until descriptors and threads are back within their bounds (closes take a moment)."""
    end = time.monotonic() + seconds
    while True:
        st = server.stats()
        if (st["fds"] <= baseline["fds"] + FD_SLACK and st["threads"] <= baseline["threads"] + THREAD_SLACK) \
                or time.monotonic() > end:
            return st
        time.sleep(0.25)


def main():
    global ARGS, MODEL
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nextn", required=True)
    ap.add_argument("--model", default=None, help="checkpoint directory (default: the binary's models/default)")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--client-timeout", type=float, default=60, help="seconds any one socket read may wait")
    ap.add_argument("--sanitized", action="store_true", help="ASan build: no RSS bound, longer timeouts")
    ARGS = ap.parse_args()
    if ARGS.sanitized:
        ARGS.client_timeout *= 3
    t_start = time.monotonic()
    flags = ["--queue-depth", str(max(64, ARGS.clients)), "--max-batch", "8", "--max-tokens", str(MAX_TOKENS),
             "--max-prompt-tokens", "256", "--max-connections", "512", "--header-timeout", str(HEADER_TIMEOUT),
             "--body-timeout", str(BODY_TIMEOUT), "--idle-timeout", str(IDLE_TIMEOUT),
             "--drain-timeout", str(DRAIN_TIMEOUT)] + (["-m", ARGS.model] if ARGS.model else [])
    server = Server(ARGS.nextn, flags, start_timeout=300 if ARGS.sanitized else 120)
    print(f"soak: {' '.join(server.argv[1:])}: listening after {server.load_seconds:.1f} s")
    failures = []
    MODEL = json.loads(simple_get(server.host, server.port, "/v1/models")[1])["data"][0]["id"]
    soak = Soak(server)
    try:
        # Reference pass: quiet, one request at a time.
        for v in soak.variants():
            c = soak.conn()
            c.send(request_bytes("POST", soak.path(v), soak.body(v, False)))
            text, outcome = soak.read_whole(c, False)
            c.close()
            if outcome:
                raise RuntimeError(f"reference pass: {v}: {outcome}")
            soak.refs[v] = text
        t_ref = time.monotonic()
        # Warm-up: the same mix at full concurrency, so the baseline is a warm server's.
        warm_n = max(ARGS.clients * 2, ARGS.requests // 10)
        soak.run_mix(warm_n, ARGS.clients, ARGS.seed + 1)
        warm_s = time.monotonic() - t_ref
        warm_failures = len(soak.failures)
        soak.outcomes.clear()
        time.sleep(1)  # the warm-up's last closes
        baseline = server.stats()
        print(f"soak: reference pass {t_ref - t_start:.1f} s ({len(soak.refs)} prompts), warm-up "
              f"{time.monotonic() - t_ref:.1f} s ({warm_failures} failures); baseline RSS "
              f"{baseline['rss_kib'] / 1024:.1f} MiB, {baseline['fds']} fds, {baseline['threads']} threads")
        abandoned_before = soak.abandoned_open
        m0 = parse_metrics(simple_get(server.host, server.port, "/metrics")[1].decode())

        stop, samples = threading.Event(), []
        monitor = threading.Thread(target=soak.health_monitor, args=(stop, samples))
        monitor.start()
        burst_samples, burst = [], {}
        # A quarter of the way in (by the warm-up's pace), the traffic still running.
        burster = threading.Thread(target=soak.stall_burst,
                                   args=(ARGS.clients, warm_s * ARGS.requests / warm_n / 4, burst_samples, burst))
        burster.start()
        t_mix = time.monotonic()
        soak.run_mix(ARGS.requests, ARGS.clients, ARGS.seed)
        mix_s = time.monotonic() - t_mix
        burster.join()
        stop.set()
        monitor.join()
        failures += soak.failures

        print(f"soak: {ARGS.requests} requests from {ARGS.clients} clients in {mix_s:.1f} s")
        by_kind = collections.defaultdict(dict)
        for (kind, outcome), n in sorted(soak.outcomes.items()):
            by_kind[kind][outcome] = n
        for kind in MIX:
            print(f"  {kind:20s} " + ", ".join(f"{o} {n}" for o, n in sorted(by_kind.get(kind, {}).items())))
        bad = [s for s in samples if s[0] != 200 or s[1] > 5]
        worst = max((s[1] for s in samples), default=0)
        print(f"  /health during the mix: {len(samples)} probes, {len(bad)} not 200 within 5 s, worst {worst:.2f} s")
        if bad:
            failures.append(f"/health during the mix: {len(bad)} of {len(samples)} probes not 200 within 5 s")
        bad = [s for s in burst_samples if s[0] != 200 or s[1] > 5]
        print(f"  {ARGS.clients} stalled half-sent requests at once: /health {len(burst_samples) - len(bad)} of "
              f"{len(burst_samples)} probes 200 within 5 s (worst {max(s[1] for s in burst_samples):.2f} s); "
              f"{burst.get('kept_open', '?')} kept open past the header timeout + 5 s")
        if bad:
            failures.append(f"/health with {ARGS.clients} stalled requests: {len(bad)} of {len(burst_samples)} "
                            f"probes not 200 within 5 s")
        if burst.get("kept_open", 1):
            failures.append(f"{burst.get('kept_open', 'all')} of {ARGS.clients} stalled requests kept open")

        # After: still serving, and back to the baseline.
        st = settle(server, baseline, IDLE_TIMEOUT + 10)
        status, body, _ = simple_get(server.host, server.port, "/health")
        if (status, body) != (200, b'{"status":"ok"}'):
            failures.append(f"/health after the soak: {status} {body[:200]!r}")
        v = soak.variants()[0]
        c = soak.conn()
        c.send(request_bytes("POST", soak.path(v), soak.body(v, False)))
        text, outcome = soak.read_whole(c, False)
        c.close()
        if outcome or text != soak.refs[v]:
            failures.append(f"completion after the soak: {outcome or repr(text)}")
        st = settle(server, baseline, 5)
        print(f"  after: RSS {st['rss_kib'] / 1024:.1f} MiB ({(st['rss_kib'] - baseline['rss_kib']) / 1024:+.1f}, "
              f"bound +{RSS_SLACK_KIB // 1024}{', not checked: --sanitized' if ARGS.sanitized else ''}), "
              f"fds {st['fds']} ({st['fds'] - baseline['fds']:+d}, bound +{FD_SLACK}), "
              f"threads {st['threads']} ({st['threads'] - baseline['threads']:+d}, bound +{THREAD_SLACK})")
        if not ARGS.sanitized and st["rss_kib"] - baseline["rss_kib"] > RSS_SLACK_KIB:
            failures.append(f"RSS grew {(st['rss_kib'] - baseline['rss_kib']) / 1024:.1f} MiB")
        if st["fds"] > baseline["fds"] + FD_SLACK:
            failures.append(f"open descriptors {baseline['fds']} -> {st['fds']}")
        if st["threads"] > baseline["threads"] + THREAD_SLACK:
            failures.append(f"threads {baseline['threads']} -> {st['threads']}")

        m1 = parse_metrics(simple_get(server.host, server.port, "/metrics")[1].decode())
        for name in ("nextn_http_connections_open", "nextn_http_connections_evicted_total", "nextn_http_timeouts_total"):
            if metric_sum(m1, name) is None:
                failures.append(f"/metrics lacks {name}")
        if metric_sum(m1, "nextn_http_connections_open") is not None:
            # The probe's own connection; the soak's are all closed.
            if metric_sum(m1, "nextn_http_connections_open") > 2:
                failures.append(f"nextn_http_connections_open {metric_sum(m1, 'nextn_http_connections_open')} after the soak")
            timeouts = metric_sum(m1, "nextn_http_timeouts_total") - (metric_sum(m0, "nextn_http_timeouts_total") or 0)
            print(f"  metrics: timeouts +{timeouts:.0f} for {soak.abandoned_open - abandoned_before} stalled clients, "
                  f"evicted {metric_sum(m1, 'nextn_http_connections_evicted_total'):.0f}")
            if timeouts < soak.abandoned_open - abandoned_before:
                failures.append(f"nextn_http_timeouts_total +{timeouts:.0f} < {soak.abandoned_open - abandoned_before} stalled")

        failures += drain(soak, server)
    finally:
        server.kill()
    print(f"soak: {time.monotonic() - t_start:.1f} s in all")
    if failures:
        print(f"soak: FAILED ({len(failures)}):")
        for f in failures[:40]:
            print("  " + f)
        if len(failures) > 40:
            print(f"  ... and {len(failures) - 40} more")
        print("server log tail:\n" + "".join(server.log[-10:]))
        return 1
    print("soak: passed")
    return 0


def drain(soak, server):
    """SIGTERM while a stream runs: the stream finishes whole, new connections are refused or
    answered 503 draining, and the server exits 0 within the drain timeout."""
    failures = []
    # The longest answer the server allows (ignore_eos), so that it is still running at the signal.
    req = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}
    c = soak.conn()
    c.send(request_bytes("POST", "/v1/completions", json.dumps(req).encode()))
    ref, outcome = soak.read_whole(c, False)
    c.close()
    if outcome:
        return [f"drain check's reference: {outcome}"]
    c = soak.conn()
    c.send(request_bytes("POST", "/v1/completions", json.dumps(dict(req, stream=True)).encode()))
    status, headers = c.read_head()
    pieces = c.iter_body(headers)
    first = next(pieces, b"")
    rest = []

    def read_rest():
        try:
            rest.extend(pieces)
        except (OSError, HttpError):
            pass  # cut: judged below by the missing [DONE]

    reader = threading.Thread(target=read_rest, daemon=True)
    reader.start()
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        hs, hb, _ = simple_get(server.host, server.port, "/health", timeout=5)
        if hs != 503 or b"draining" not in hb:
            failures.append(f"/health while draining: {hs} {hb[:100]!r} (expected 503 draining or refused)")
    except (OSError, HttpError):
        pass  # refused: not accepting any more
    reader.join(DRAIN_TIMEOUT + 5)
    text, done = [], False
    for data in sse_data([first, *rest]):
        if data == b"[DONE]":
            done = True
        elif status == 200:
            text.append(chunk_text(json.loads(data)))
    c.close()
    if status != 200 or not done or "".join(text) != ref:
        failures.append(f"the stream running at SIGTERM did not finish whole (status {status}, [DONE] {done}, "
                        f"text {'equal' if ''.join(text) == ref else 'not equal'} to its reference)")
    code, _ = server.terminate(max(1.0, DRAIN_TIMEOUT - (time.monotonic() - t0)), send=False)
    print(f"  SIGTERM during a stream: stream {'finished' if done else 'CUT'} ({len(''.join(text))} of {len(ref)} "
          f"chars), exit {code} after {time.monotonic() - t0:.1f} s (bound {DRAIN_TIMEOUT} s)")
    if code != 0:
        failures.append(f"exit after SIGTERM: {code}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
