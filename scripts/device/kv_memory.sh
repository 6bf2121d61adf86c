#!/usr/bin/env bash
# Issue 23 item 5 on the H200, one device call: device memory of `nextn serve
# --backend cuda` on a random Qwen3.5-27B-shape q4 checkpoint with 32 slots of
# up to 30,000 prompt tokens, at start and after one request of a long
# prompt; with the KV cache in blocks (docs/engine.md, "Memory that grows
# with use") the start holds no KV, and the request's blocks are what grows.
#
#   scripts/device/prepare.sh     # here: builds build-cuda/, packs build-cuda.tar.xz
#   device run, carry build-cuda.tar.xz: bash scripts/device/kv_memory.sh
#
# Environment: NEXTN_BUILD (build-cuda), NEXTN_KV_PRESET (qwen3.5-27b),
# NEXTN_KV_PROMPT (16000: the long prompt's tokens), NEXTN_CK_DIR (/tmp/nextn-ck).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device/lib.sh
CK=${NEXTN_CK_DIR:-/tmp/nextn-ck}
PRESET=${NEXTN_KV_PRESET:-qwen3.5-27b}
PROMPT=${NEXTN_KV_PROMPT:-16000}
record_start

dir=$(serve_checkpoint "$PRESET")
mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
say "device memory before the server: $(mem) MiB"
"$BUILD/nextn" serve --backend cuda -m "$dir" --port 0 --max-batch 32 --max-prompt-tokens 30000 --max-tokens 64 \
  --draft none 2>"$LOG/serve.err" &
pid=$!
port=""
for _ in $(seq 300); do
  port=$(head -1 "$LOG/serve.err" 2>/dev/null | grep -oE ':[0-9]+$' | tr -d :)
  [ -n "$port" ] && break
  sleep 1
done
if [ -z "$port" ]; then
  say "FAIL: serve did not start: $(head -3 "$LOG/serve.err")"
else
  say "serve --max-batch 32 --max-prompt-tokens 30000 --max-tokens 64: listening; device memory $(mem) MiB"
  python3 - "$port" "$PROMPT" >>"$SUMMARY" 2>&1 <<'PY'
import json, sys, time, urllib.request
port, n = int(sys.argv[1]), int(sys.argv[2])
def metrics():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    # Qwen3.5 has one pool, "attention": its label is left out of the names.
    return {l.split()[0].replace('{pool="attention"}', ''): float(l.split()[1])
            for l in text.splitlines() if l.startswith("nextn_kv_")}
print("kv metrics at start:", metrics())
body = json.dumps({"prompt": [11 + (i * 7919) % 8000 for i in range(n)], "max_tokens": 8, "temperature": 0,
                   "ignore_eos": True}).encode()
t = time.time()
r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                                  {"Content-Type": "application/json"}), timeout=600)
out = json.loads(r.read())
print(f"one request of {n} prompt tokens: {out['usage']} in {time.time() - t:.1f} s")
print("kv metrics after it:", metrics())
PY
  say "after the request: device memory $(mem) MiB"
fi
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
record_finish
