"""Loopback HTTP/1.1 over raw sockets, and a `nextn serve` process, for
tests/server/soak.py and scripts/bench_server_connections.py.

Raw sockets rather than http.client: the soak has to send half a request,
dribble headers byte by byte, close a stream after its first event or reset a
connection, which the standard library's clients do not let a caller do.
Standard library only.
"""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time



class HttpError(Exception):
    """The server's bytes were not an HTTP response we can read."""


class Conn:
    """One TCP connection to the server; requests and responses by hand."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    def send(self, data: bytes):
        self.sock.sendall(data)

    def read_head(self):
        """(status, headers with lower-case names); HttpError on EOF or garbage."""
        line = self.f.readline(65537)
        if not line:
            raise HttpError("connection closed before a status line")
        m = re.match(rb"HTTP/1\.[01] (\d{3})", line)
        if not m:
            raise HttpError(f"bad status line {line[:80]!r}")
        headers = {}
        while True:
            h = self.f.readline(65537)
            if not h:
                raise HttpError("connection closed in the headers")
            if h in (b"\r\n", b"\n"):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(m.group(1)), headers

    def iter_body(self, headers):
        """The body's pieces as they arrive (chunked, Content-Length or until close)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = self.f.readline(1024)
                if not size_line:
                    raise HttpError("connection closed inside a chunked body")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.f.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                data = self.f.read(size)
                if len(data) != size:
                    raise HttpError("connection closed inside a chunk")
                self.f.readline(1024)
                yield data
        elif "content-length" in headers:
            n = int(headers["content-length"])
            data = self.f.read(n) if n else b""
            if len(data) != n:
                raise HttpError(f"body cut at {len(data)} of {n} bytes")
            yield data
        else:
            while True:
                data = self.f.read1(65536)
                if not data:
                    return
                yield data

    def read_response(self):
        status, headers = self.read_head()
        return status, headers, b"".join(self.iter_body(headers))

    def closed_by_peer(self, timeout):
        """True when the server closes the connection (EOF or reset) within timeout s, also after
        sending a response first (e.g. a 408); False when it stays open."""
        self.sock.settimeout(timeout)
        end = time.monotonic() + timeout
        try:
            while time.monotonic() < end:
                self.sock.settimeout(max(0.01, end - time.monotonic()))
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def close(self, reset=False):
        """Close; reset=True sends an RST (SO_LINGER 0) instead of a FIN, as a crashed client would."""
        try:
            if reset:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.f.close()
            self.sock.close()
        except OSError:
            pass


def request_bytes(method, path, body=None, headers=None, keep_alive=False, host="127.0.0.1"):
    h = {"Host": host, "Connection": "keep-alive" if keep_alive else "close"}
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + (body or b"")


def sse_data(pieces):
    """The `data:` payloads of a server-sent event stream, as bytes, in order."""
    buf = b""
    for p in pieces:
        buf += p
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    yield line[6:].rstrip(b"\r")
                elif line.startswith(b"data:"):
                    yield line[5:].rstrip(b"\r")


def chunk_text(obj):
    """The text one completion / chat response or stream chunk carries."""
    if not obj.get("choices"):
        return ""
    c = obj["choices"][0]
    if "text" in c:
        return c["text"] or ""
    if "delta" in c:
        return c["delta"].get("content") or ""
    return (c.get("message") or {}).get("content") or ""


def is_error_json(body: bytes):
    """An OpenAI-style error: {"error": {"message": str, "type": str, ...}}."""
    try:
        e = json.loads(body)["error"]
        return isinstance(e["message"], str) and isinstance(e["type"], str)
    except (ValueError, KeyError, TypeError):
        return False


def simple_get(host, port, path, timeout=30):
    """(status, body bytes, seconds) of a GET on a fresh connection."""
    t0 = time.perf_counter()
    c = Conn(host, port, timeout)
    try:
        c.send(request_bytes("GET", path))
        status, _, body = c.read_response()
    finally:
        c.close()
    return status, body, time.perf_counter() - t0


def parse_metrics(text):
    """Prometheus text: {name or name{labels}: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


def metric_sum(metrics, name):
    """The sum of a metric over its label sets; None when the server has no such metric."""
    vals = [v for k, v in metrics.items() if k == name or k.startswith(name + "{")]
    return sum(vals) if vals else None


class Server:
    """One `nextn serve --port 0` process, up once its `listening on` line is printed."""

    def __init__(self, nextn, flags, start_timeout=120, preexec_fn=None):
        argv = list(flags)
        self.argv = [nextn, "serve", "--port", "0", *argv]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=preexec_fn)
        self.log = []
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("nextn serve exited: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://([\d.]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
        else:
            self.proc.kill()
            raise RuntimeError("nextn serve printed no `listening on` line")
        self.load_seconds = time.monotonic() - self.started
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def stats(self):
        """Resident memory (KiB), open file descriptors and threads, from /proc."""
        pid = self.proc.pid
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        return {"rss_kib": rss, "fds": len(os.listdir(f"/proc/{pid}/fd")),
                "threads": len(os.listdir(f"/proc/{pid}/task"))}

    def terminate(self, timeout, send=True):
        """SIGTERM (send=False: one was sent already); (exit code or None when it did not exit
        within timeout, seconds taken). Kills it then."""
        t0 = time.monotonic()
        if send:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            self.proc.kill()
            self.proc.wait()
        took = time.monotonic() - t0
        self._drain.join(timeout=10)
        return code, took

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
