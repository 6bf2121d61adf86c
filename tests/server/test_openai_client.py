#!/usr/bin/env python3
"""nextn serve against the official `openai` Python client, on loopback.

Starts `nextn serve --port 0` (the default model), then checks completions and
chat (greedy text equal to `nextn generate` byte for byte), streaming, seeded
sampling, logprobs, stop strings, OpenAI-style errors (400, 404, 413, 429),
cancelled streams, a non-streaming request whose client disconnects
(cancelled, its slot freed), /health, /metrics, and a bounded load test
(concurrent streams for a fixed time: every response complete and equal to
its greedy answer, none lost, resident memory stable). Then a Gemma 4 target
(the committed tokenizer fixture) with its assistant as the drafter:
completions and chat equal to `nextn generate --draft ASSISTANT` and to
transformers' chat text, streaming, seeded sampling.

    tests/server/test_openai_client.py --nextn build/nextn [--load-seconds 10] [--sanitized]

Exits 77 (ctest: skipped) when the `openai` package is not installed.
"""
import argparse
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

try:
    import openai
except ImportError:
    print("openai is not installed (python3 -m pip install openai): skipped")
    sys.exit(77)

ARGS = None
EOS = 8189  # models/default/config.json eos_token_id
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:", "for i in range(", "x = [", "# sort a list\n",
           "def main():\n", "while True:"]


class Server:
    """One `nextn serve` process on a free loopback port."""

    def __init__(self, *flags):
        self.proc = subprocess.Popen([ARGS.nextn, "serve", "--port", "0", *flags], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("nextn serve exited: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://([\d.]+):(\d+)", line)
            if m:
                self.base = f"http://{m.group(1)}:{m.group(2)}"
                break
        else:
            raise RuntimeError("nextn serve did not start")
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()
        self.model = json.loads(self.get("/v1/models")[1])["data"][0]["id"]

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def client(self, **kw):
        return openai.OpenAI(base_url=self.base + "/v1", api_key="none", timeout=120, **kw)

    def request(self, method, path, body=None, headers=None):
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body: bytes):
        return self.request("POST", path, body, {"Content-Type": "application/json"})

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.drain.join(timeout=10)
        self.proc.stderr.close()
        return code


def generate(prompt, n, chat=False, flags=()):
    """`nextn generate` for the same prompt: its JSON (tokens, text, stats)."""
    cmd = [ARGS.nextn, "generate", "--prompt", prompt, "-n", str(n), "--json"] + (["--chat"] if chat else [])
    return json.loads(subprocess.run(cmd + list(flags), check=True, capture_output=True, text=True).stdout)


def expected_text(prompt, n, chat=False):
    """The server's greedy text: `nextn generate`'s, without the EOS token's text when it stopped there."""
    g = generate(prompt, n, chat)
    if g["stats"]["stop"] == "eos":
        ids = ",".join(str(t) for t in g["tokens"][:-1])
        if not ids:
            return ""
        out = subprocess.run([ARGS.nextn, "detokenize", "--ids", ids], check=True, capture_output=True, text=True)
        return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout
    return g["text"]


class OpenAIClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--draft", "mtp", "--max-body-kib", "64", "--max-tokens", "512")
        cls.client = cls.server.client(max_retries=0)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"nextn serve exited {code}: {''.join(cls.server.log[-20:])}"

    def test_models_and_health(self):
        ids = [m.id for m in self.client.models.list().data]
        self.assertEqual(ids, [self.server.model])
        self.assertEqual(self.server.get("/health"), (200, '{"status":"ok"}'))

    def test_greedy_completion_equals_generate(self):
        for prompt in PROMPTS[:3]:
            r = self.client.completions.create(model=self.server.model, prompt=prompt, max_tokens=32, temperature=0)
            g = generate(prompt, 32)
            self.assertEqual(g["stats"]["stop"], "budget")  # no EOS: the texts compare whole
            self.assertEqual(r.choices[0].text, g["text"], prompt)
            self.assertEqual(r.choices[0].finish_reason, "length")
            self.assertEqual(r.usage.completion_tokens, 32)
            self.assertEqual(r.usage.prompt_tokens, len(g["tokens"]) and r.usage.prompt_tokens)
            self.assertEqual(r.object, "text_completion")

    def test_greedy_chat_equals_generate_chat(self):
        msg = "Write a function that adds two numbers."
        r = self.client.chat.completions.create(model=self.server.model, max_tokens=40, temperature=0,
                                                messages=[{"role": "user", "content": msg}])
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.choices[0].message.content, expected_text(msg, 40, chat=True))
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertEqual(r.object, "chat.completion")

    def test_streaming_completion_and_chat(self):
        prompt = PROMPTS[0]
        whole = self.client.completions.create(model=self.server.model, prompt=prompt, max_tokens=24, temperature=0)
        chunks = list(self.client.completions.create(model=self.server.model, prompt=prompt, max_tokens=24,
                                                     temperature=0, stream=True,
                                                     stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, whole.choices[0].text)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "length")
        self.assertEqual(chunks[-1].usage.completion_tokens, 24)
        self.assertGreater(len(chunks), 3)  # streamed, not one blob

        messages = [{"role": "user", "content": "Say hello."}]
        whole = self.client.chat.completions.create(model=self.server.model, messages=messages, max_tokens=24,
                                                    temperature=0)
        chunks = list(self.client.chat.completions.create(model=self.server.model, messages=messages, max_tokens=24,
                                                          temperature=0, stream=True))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks), whole.choices[0].message.content)
        self.assertIsNotNone(chunks[-1].choices[0].finish_reason)
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))

    def test_seeded_sampling_reproduces(self):
        kw = dict(model=self.server.model, prompt=PROMPTS[1], max_tokens=24, temperature=0.9, top_p=0.95)
        a = self.client.completions.create(seed=7, **kw).choices[0].text
        b = self.client.completions.create(seed=7, **kw).choices[0].text
        c = self.client.completions.create(seed=8, extra_body={"top_k": 40, "min_p": 0.01}, **kw).choices[0].text
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_logprobs(self):
        r = self.client.completions.create(model=self.server.model, prompt=PROMPTS[2], max_tokens=8, temperature=0,
                                           logprobs=3)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 8)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(value, 0.0)
            self.assertEqual(len(top), 3)
            self.assertAlmostEqual(max(top.values()), value, places=5)  # greedy: the chosen token is the top one
        r = self.client.chat.completions.create(model=self.server.model, max_tokens=6, temperature=0.5, seed=1,
                                                messages=[{"role": "user", "content": "hi"}], logprobs=True,
                                                top_logprobs=2)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        self.assertTrue(all(len(c.top_logprobs) == 2 and c.logprob <= 0 for c in content))

    def test_stop_strings(self):
        full = self.client.completions.create(model=self.server.model, prompt=PROMPTS[0], max_tokens=32,
                                              temperature=0).choices[0].text
        stop = full[10:13]
        for stream in (False, True):
            kw = dict(model=self.server.model, prompt=PROMPTS[0], max_tokens=32, temperature=0, stop=[stop])
            if stream:
                chunks = list(self.client.completions.create(stream=True, **kw))
                text = "".join(c.choices[0].text for c in chunks)
                reason = chunks[-1].choices[0].finish_reason
            else:
                r = self.client.completions.create(**kw)
                text, reason = r.choices[0].text, r.choices[0].finish_reason
            self.assertEqual(text, full[:full.find(stop)])
            self.assertEqual(reason, "stop")

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model=self.server.model, prompt="x", temperature=5)
        self.assertEqual(e.exception.status_code, 400)
        self.assertEqual(e.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model=self.server.model, prompt="x", max_tokens=100000)
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model=self.server.model, messages=[])
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.completions.create(model="no-such-model", prompt="x")
        self.assertEqual(e.exception.body["code"], "model_not_found")
        for status, body in [self.server.post("/v1/completions", b"{not json"),
                             self.server.get("/v1/nothing"),
                             self.server.post("/v1/completions", b'{"prompt": "' + b"a" * 70000 + b'"}')]:
            err = json.loads(body)["error"]
            self.assertIn(status, (400, 404, 413))
            self.assertTrue(err["message"] and err["type"])
        self.assertEqual(self.server.post("/v1/completions", b"{not json")[0], 400)
        self.assertEqual(self.server.get("/v1/nothing")[0], 404)
        self.assertEqual(self.server.post("/v1/completions", b'{"prompt": "' + b"a" * 70000 + b'"}')[0], 413)
        self.assertEqual(self.server.get("/health")[0], 200)  # still serving

    def completion_tokens_served(self):
        metrics = self.server.get("/metrics")[1]
        return int(re.search(r"^nextn_completion_tokens_total (\d+)$", metrics, re.M).group(1))

    def test_cancelled_stream_frees_the_engine(self):
        before = self.completion_tokens_served()
        stream = self.client.completions.create(model=self.server.model, prompt=PROMPTS[3], max_tokens=512,
                                                temperature=0, stream=True, extra_body={"ignore_eos": True})
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()
        t0 = time.time()
        r = self.client.completions.create(model=self.server.model, prompt=PROMPTS[4], max_tokens=4, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 4)
        # 512 tokens take seconds on 2 cores; the next request did not wait for them.
        self.assertLess(time.time() - t0, 30)
        # The cancelled job stopped soon after the client left, far short of its 512 tokens.
        self.assertLess(self.completion_tokens_served() - before, 256 + 4)
        metrics = self.server.get("/metrics")[1]
        self.assertIn("nextn_accepted_at_position_total{position=\"1\"}", metrics)
        self.assertIn("nextn_time_to_first_token_seconds_bucket", metrics)
        self.assertRegex(metrics, r'nextn_requests_total\{endpoint="/v1/completions",status="200"\} \d+')


    def metric(self, name):
        m = re.search(r"^" + re.escape(name) + r" (\d+)$", self.server.get("/metrics")[1], re.M)
        return int(m.group(1)) if m else 0

    def test_disconnected_non_streaming_request_is_cancelled(self):
        deadline = time.time() + 60
        while self.metric("nextn_requests_running") and time.time() < deadline:
            time.sleep(0.02)  # an earlier test's cancelled job may still be ending
        before_tokens, before_cancelled = self.completion_tokens_served(), self.metric("nextn_cancelled_total")
        host, port = self.server.base[len("http://"):].split(":")
        body = json.dumps({"prompt": PROMPTS[5], "max_tokens": 512, "temperature": 0, "ignore_eos": True}).encode()
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            deadline = time.time() + 30
            while self.metric("nextn_requests_running") == 0 and time.time() < deadline:
                time.sleep(0.02)  # until the job runs
            self.assertEqual(self.metric("nextn_requests_running"), 1)
        deadline = time.time() + 30  # closed: the server sees it within a round
        while (self.metric("nextn_cancelled_total") == before_cancelled or self.metric("nextn_requests_running")) \
                and time.time() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.metric("nextn_cancelled_total"), before_cancelled + 1)
        self.assertEqual(self.metric("nextn_requests_running"), 0)  # the slot is free
        self.assertLess(self.completion_tokens_served() - before_tokens, 256)  # far short of its 512 tokens
        self.assertRegex(self.server.get("/metrics")[1],
                         r'nextn_requests_total\{endpoint="/v1/completions",status="499"\} 1')


GEMMA4 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "gemma4", "gemma4-tokenizer-bf16")


class Gemma4WithAssistant(unittest.TestCase):
    """A Gemma 4 target served with its assistant as the drafter (tiny random fixture: fast)."""

    @classmethod
    def setUpClass(cls):
        cls.target, cls.assistant = os.path.join(GEMMA4, "target"), os.path.join(GEMMA4, "assistant")
        with open(os.path.join(GEMMA4, "reference.json")) as f:
            cls.ref = json.load(f)
        # The fixture's max_position_embeddings is 256: slots of 128 + 64 + K + 1 positions.
        cls.server = Server("-m", cls.target, "--draft", cls.assistant, "--max-prompt-tokens", "128",
                            "--max-tokens", "64")
        cls.client = cls.server.client(max_retries=0)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"nextn serve exited {code}: {''.join(cls.server.log[-20:])}"

    def generate(self, prompt, n, chat=False, draft=True):
        flags = ["-m", self.target, "--ignore-eos"] + (["--draft", self.assistant] if draft else [])
        return generate(prompt, n, chat, flags)

    def test_greedy_completion_and_chat_equal_generate_and_transformers(self):
        prompt = self.ref["prompt_text"]
        n = len(self.ref["text_greedy_tokens"])
        r = self.client.completions.create(model=self.server.model, prompt=prompt, max_tokens=n, temperature=0,
                                           extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].text, self.generate(prompt, n)["text"])
        self.assertEqual(r.choices[0].text, self.generate(prompt, n, draft=False)["text"])
        self.assertEqual(r.choices[0].text, self.ref["text_greedy_text"])
        n = len(self.ref["chat_greedy_tokens"])
        r = self.client.chat.completions.create(model=self.server.model, max_tokens=n, temperature=0,
                                                messages=[{"role": "user", "content": prompt}],
                                                extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].message.content, self.generate(prompt, n, chat=True)["text"])
        self.assertEqual(r.choices[0].message.content, self.ref["chat_greedy_text"])  # apply_chat_template + generate
        self.assertEqual(r.usage.completion_tokens, n)
        metrics = self.server.get("/metrics")[1]
        self.assertRegex(metrics, r"nextn_drafted_tokens_total [1-9]")

    def test_streaming_and_seeded_sampling(self):
        messages = [{"role": "user", "content": "Say hello."}]
        for temperature, seed in ((0, None), (0.9, 5)):
            kw = dict(model=self.server.model, messages=messages, max_tokens=32, temperature=temperature, seed=seed,
                      extra_body={"ignore_eos": True})
            whole = self.client.chat.completions.create(**kw).choices[0].message.content
            again = self.client.chat.completions.create(**kw).choices[0].message.content
            chunks = list(self.client.chat.completions.create(stream=True, **kw))
            self.assertEqual(whole, again)
            self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks), whole)
            self.assertEqual(chunks[-1].choices[0].finish_reason, "length")
        self.assertRegex(self.server.get("/metrics")[1], r'nextn_verify_rounds_total\{arm="sampled"\} [1-9]')


class Limits(unittest.TestCase):
    def test_full_queue_answers_429(self):
        server = Server("--queue-depth", "1", "--max-batch", "1")  # one running, one waiting, the rest 429
        try:
            client = server.client(max_retries=0)

            def long_request(_):
                try:
                    client.completions.create(model=server.model, prompt="def f():", max_tokens=200, temperature=0,
                                              extra_body={"ignore_eos": True})
                    return 200
                except openai.RateLimitError as e:
                    return e.status_code
            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                codes = list(pool.map(long_request, range(6)))
            self.assertIn(429, codes)
            self.assertIn(200, codes)
            self.assertEqual(set(codes), {200, 429})
        finally:
            self.assertEqual(server.stop(), 0)


class Hostile(unittest.TestCase):
    """Clients that would crash or starve a server (issue 22): deep nesting, half-sent requests, the drain."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("--max-tokens", "64")  # the default 1 MiB body limit
        cls.client = cls.server.client(max_retries=0)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"nextn serve exited {code}: {''.join(cls.server.log[-20:])}"

    def assert_serving(self):
        self.assertEqual(self.server.get("/health"), (200, '{"status":"ok"}'))
        r = self.client.completions.create(model=self.server.model, prompt=PROMPTS[0], max_tokens=4, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 4)

    def test_deeply_nested_request_gets_400(self):
        depth = 300000  # a 600 KB body under the 1 MiB limit
        body = (b'{"model":"default","messages":[{"role":"user","content":"hi","x":' + b"[" * depth + b"]" * depth +
                b"}]}")
        self.assertGreater(len(body), 600000)
        status, text = self.server.post("/v1/chat/completions", body)
        self.assertEqual(status, 400, text)
        self.assertIn("nest", json.loads(text)["error"]["message"])
        self.assert_serving()

    def test_half_sent_requests_do_not_starve_the_server(self):
        host, port = self.server.base[len("http://"):].split(":")
        socks = []
        try:
            for _ in range(64):
                s = socket.create_connection((host, int(port)))
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
                socks.append(s)
            t0 = time.time()
            self.assertEqual(self.server.get("/health")[0], 200)
            print(f"hostile: /health with 64 half-sent requests open: {1000 * (time.time() - t0):.1f} ms",
                  file=sys.stderr)
            self.assert_serving()
        finally:
            for s in socks:
                s.close()

    def test_json_response_format_is_refused_by_name(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model=self.server.model, messages=[{"role": "user", "content": "x"}],
                                                response_format={"type": "json_object"})
        self.assertEqual(e.exception.body["param"], "response_format")


class Drain(unittest.TestCase):
    def test_sigterm_lets_a_running_stream_finish_then_exits_0(self):
        server = Server("--drain-timeout", "60")
        client = server.client(max_retries=0)
        stream = client.completions.create(model=server.model, prompt=PROMPTS[1], max_tokens=64, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True})
        text, reasons = "", []
        for i, chunk in enumerate(stream):
            if i == 0:
                server.proc.send_signal(signal.SIGTERM)
            if chunk.choices:
                text += chunk.choices[0].text
                if chunk.choices[0].finish_reason:
                    reasons.append(chunk.choices[0].finish_reason)
        self.assertEqual(reasons, ["length"])  # the whole answer, not cut
        self.assertTrue(text)
        self.assertEqual(server.proc.wait(timeout=60), 0)
        server.drain.join(timeout=10)
        server.proc.stderr.close()
        log = "".join(server.log)
        self.assertIn("draining", log)
        self.assertIn("0 request(s) cut", log)


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


class EngineSteps(unittest.TestCase):
    """Issue 23's CPU check: `serve --max-batch 8 --draft mtp` answers 12 concurrent greedy requests
    exactly as their solo `nextn generate --draft mtp` runs, with one LM-head launch per engine step."""

    def test_twelve_concurrent_greedy_requests_equal_solo_runs_one_head_launch_per_step(self):
        prompts = PROMPTS + ["def add(a, b):", "import sys\n", "return ", "if x > 0:"]
        self.assertEqual(len(prompts), 12)
        n = 24
        solo = {p: generate(p, n, flags=["--draft", "mtp"]) for p in prompts}
        server = Server("--draft", "mtp", "--max-batch", "8")
        try:
            client = server.client(max_retries=0)
            before = server.get("/metrics")[1]
            barrier = threading.Barrier(len(prompts))

            def ask(p):
                barrier.wait()  # all twelve arrive together: eight run, four queue and join as slots free
                return client.completions.create(model=server.model, prompt=p, max_tokens=n, temperature=0)
            with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
                answers = dict(zip(prompts, pool.map(ask, prompts)))
            after = server.get("/metrics")[1]
            for p in prompts:
                g = solo[p]
                want = g["text"] if g["stats"]["stop"] == "budget" else expected_text(p, n)
                self.assertEqual(answers[p].choices[0].text, want, p)
            d = {k: metric(after, k) - (metric(before, k) or 0) for k in
                 ("nextn_engine_steps_total", "nextn_lm_head_launches_total", "nextn_mtp_forward_launches_total")}
            self.assertGreater(d["nextn_engine_steps_total"], 0)
            self.assertEqual(d["nextn_lm_head_launches_total"], d["nextn_engine_steps_total"], after)
            self.assertLessEqual(d["nextn_mtp_forward_launches_total"], d["nextn_engine_steps_total"], after)
            # Steps served several requests at once: the histogram's "1 sequence" bucket holds fewer than all.
            ones = float(re.search(r'^nextn_step_sequences_bucket\{le="1"\} (\S+)$', after, re.M).group(1))
            self.assertLess(ones, metric(after, "nextn_step_sequences_count"))
        finally:
            self.assertEqual(server.stop(), 0)


class PrefillStall(unittest.TestCase):
    """`serve --prefill-stall 2`: prompts that join running requests are cut to the step budget (its
    histogram in /metrics), and every answer still equals its solo `nextn generate` run."""

    def test_budgeted_prompts_answer_as_alone(self):
        prompts = [p * 3 for p in PROMPTS[:6]]
        lengths = [8, 24, 12, 24, 16, 24]
        server = Server("--max-batch", "3", "--prefill-chunk", "16", "--prefill-stall", "2")
        try:
            client = server.client(max_retries=0)
            barrier = threading.Barrier(len(prompts))

            def ask(i):
                barrier.wait()  # three run, three join as slots free while the others decode
                return client.completions.create(model=server.model, prompt=prompts[i], max_tokens=lengths[i],
                                                 temperature=0)
            with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
                answers = list(pool.map(ask, range(len(prompts))))
            for i, p in enumerate(prompts):
                self.assertEqual(answers[i].choices[0].text, expected_text(p, lengths[i]), p)
            self.assertGreater(metric(server.get("/metrics")[1], "nextn_prefill_budget_rows_count"), 0)
        finally:
            self.assertEqual(server.stop(), 0)


class OracleAndAutoK(unittest.TestCase):
    """`serve --draft oracle` (issue 23 item 9) at K chosen per step: greedy answers equal plain
    `nextn generate`; a repeated request replays its truth; sampling is refused by field; the
    block-choice metrics are there."""

    def test_oracle_answers_exactly_replays_and_refuses_sampling(self):
        server = Server("--draft", "oracle", "--accept-rates", "0.9,0.8,0.7", "--draft-cost", "mtp", "--max-batch", "4")
        try:
            client = server.client(max_retries=0)
            n = 24
            prompts = PROMPTS[:4]
            with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
                answers = list(pool.map(lambda p: client.completions.create(
                    model=server.model, prompt=p, max_tokens=n, temperature=0), prompts))
            for p, a in zip(prompts, answers):
                self.assertEqual(a.choices[0].text, expected_text(p, n), p)
            again = client.completions.create(model=server.model, prompt=prompts[0], max_tokens=n, temperature=0)
            self.assertEqual(again.choices[0].text, answers[0].choices[0].text)
            m = server.get("/metrics")[1]
            self.assertEqual(metric(m, "nextn_oracle_truths_run_total"), 4, m)
            self.assertEqual(metric(m, "nextn_oracle_truths_replayed_total"), 1, m)
            self.assertGreater(metric(m, "nextn_accepted_tokens_total"), 0, m)
            self.assertGreater(metric(m, "nextn_block_size_chosen_count"), 0, m)
            self.assertIn('nextn_step_cost_ms{sequences="4",rows="32"}', m)
            with self.assertRaises(openai.BadRequestError) as e:
                client.completions.create(model=server.model, prompt="x", max_tokens=4, temperature=0.7)
            self.assertEqual(e.exception.body.get("param"), "temperature", e.exception.body)
        finally:
            self.assertEqual(server.stop(), 0)


class Load(unittest.TestCase):
    def test_concurrent_streams_lose_nothing(self):
        server = Server("--draft", "mtp")
        try:
            client = server.client(max_retries=0)
            n = 48
            expected = {p: client.completions.create(model=server.model, prompt=p, max_tokens=n,
                                                     temperature=0).choices[0].text for p in PROMPTS}
            rss_start = server.rss_kib()
            deadline = time.time() + ARGS.load_seconds
            results = []

            def worker(k):
                done = []
                while time.time() < deadline:
                    p = PROMPTS[(k + len(done)) % len(PROMPTS)]
                    chunks = list(client.completions.create(model=server.model, prompt=p, max_tokens=n,
                                                            temperature=0, stream=True,
                                                            stream_options={"include_usage": True}))
                    text = "".join(c.choices[0].text for c in chunks if c.choices)
                    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
                    done.append((p, text, reasons, chunks[-1].usage))
                return done
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                for done in pool.map(worker, range(8)):
                    results.extend(done)
            rss_end = server.rss_kib()
            self.assertGreaterEqual(len(results), 8)
            for p, text, reasons, usage in results:
                self.assertEqual(text, expected[p], p)
                self.assertEqual(len(reasons), 1)
                self.assertIsNotNone(usage)
            served = int(re.search(r'nextn_requests_total\{endpoint="/v1/completions",status="200"\} (\d+)',
                                   server.get("/metrics")[1]).group(1))
            self.assertEqual(served, len(results) + len(PROMPTS))  # none lost, none extra
            print(f"load: {len(results)} streams in {ARGS.load_seconds}s, RSS {rss_start} -> {rss_end} KiB",
                  file=sys.stderr)
            if not ARGS.sanitized:  # ASan's quarantine grows the heap by design
                self.assertLess(rss_end - rss_start, 32 * 1024)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nextn", default="build/nextn")
    parser.add_argument("--load-seconds", type=float, default=10)
    parser.add_argument("--sanitized", action="store_true")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
