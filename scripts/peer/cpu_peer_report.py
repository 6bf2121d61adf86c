#!/usr/bin/env python3
"""Summaries of scripts/peer/cpu_peer.sh's raw runs: OUT.md and OUT.json.

Per engine (nextn, llama.cpp per weight type) and metric, median [min, max]
over the repeats: decode 128 and prefill 512 tokens/s (nextn bench decode vs
llama-bench), and greedy / MTP generation tokens/s through each CLI, each
from the engine's own decode timer inside the process (cpu_peer.sh, 4.):
nextn's stats.decode_ms over stats.generated - 1 tokens; llama.cpp greedy's
"eval time" + "sampling time" over eval's runs; llama-speculative-simple's
"decoded N tokens in T seconds". Then nextn / peer ratios against issue 27's
targets (decode >= 1.2x the peer's best weight type, prefill >= 1.0x, MTP >=
1.3x the peer's MTP; greedy generation shown without a target), the MTP
acceptances, and whether the greedy texts match (where not, the first
differing character and the text around it).

    cpu_peer_report.py parse-peer-stderr FILE eval|decoded

is cpu_peer.sh's parser of one peer run's stderr: prints the timer's numbers
as one JSON object, or exits 1 when the timer's line is missing.
"""
import argparse
import json
import re
import statistics
import sys
from pathlib import Path

# Peer tools that give more tokens than -n asks for (cpu_peer.sh says why):
# their text is equal when it starts with nextn's.
OVERSHOOTING_TOOLS = {"llama-speculative-simple"}
TARGETS = {"decode128": 1.2, "prefill512": 1.0, "greedy": None, "mtp": 1.3}
LABELS = {"decode128": "decode 128 (bench)", "prefill512": "prefill 512 (bench)", "greedy": "greedy gen (CLI)",
          "mtp": "MTP gen (CLI)"}


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else None


# The peer's perf lines (common_perf_print / llama_perf_context_print and
# llama-speculative-simple's summary). "eval time" is matched after a colon
# and spaces so that "prompt eval time" is not.
PEER_LINES = {
    "eval": re.compile(r":\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs"),
    "sampling": re.compile(r":\s+sampling time =\s*([\d.]+) ms"),
    "decoded": re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds"),
    "drafted": re.compile(r"n_drafted\s*=\s*(\d+)"),
    "accepted": re.compile(r"n_accept\s*=\s*(\d+)"),
}


def parse_peer_stderr(text, timer):
    found = {k: r.search(text) for k, r in PEER_LINES.items()}
    if not found[timer]:
        return None
    out = {}
    if found["eval"]:
        out["eval_ms"], out["eval_runs"] = float(found["eval"][1]), int(found["eval"][2])
    if found["sampling"]:
        out["sampling_ms"] = float(found["sampling"][1])
    if found["decoded"]:
        out["decoded_tokens"], out["decoded_s"] = int(found["decoded"][1]), float(found["decoded"][2])
    for k in ("drafted", "accepted"):
        if found[k]:
            out[k] = int(found[k][1])
    return out


# The tokens each timer counted (those its rate is over).
TIMER_TOKENS = {"decode_ms": "tokens", "eval": "eval_runs", "decoded": "decoded_tokens"}


def gen_rate(timer, res):
    """tokens/s of one timed generation, from its engine's own decode timer."""
    if timer == "decode_ms":  # nextn
        return res["tokens"] / (res["decode_ms"] / 1000) if res["decode_ms"] > 0 else None
    if timer == "eval":  # llama.cpp completion: decode forwards + sampling
        ms = res["eval_ms"] + res.get("sampling_ms", 0.0)
        return res["eval_runs"] / (ms / 1000) if ms > 0 else None
    if timer == "decoded":  # llama-speculative-simple
        return res["decoded_tokens"] / res["decoded_s"] if res["decoded_s"] > 0 else None
    raise ValueError(f"unknown timer {timer}")


def llama_bench_rate(result, n_prompt, n_gen):
    for e in result:
        if e.get("n_prompt") == n_prompt and e.get("n_gen") == n_gen:
            return e["avg_ts"]
    return None


def collect(runs):
    samples = {}  # engine -> metric -> [tokens/s]
    for r in runs:
        m = samples.setdefault(r["engine"], {})
        if r["kind"] == "bench":
            res = r["result"]
            if r["engine"] == "nextn":
                dec = res["decode_tokens_per_second"]["median"]
                pre = res["long_prefill_tokens_per_second"]["median"]
            else:
                dec, pre = llama_bench_rate(res, 0, 128), llama_bench_rate(res, 512, 0)
            if dec is not None:
                m.setdefault("decode128", []).append(dec)
            if pre is not None:
                m.setdefault("prefill512", []).append(pre)
        else:
            res = r["result"]
            if res is None:  # a failed run, or one whose timer line was lost (failures.log)
                continue
            metric = "greedy" if r["draft"] == "none" else "mtp"
            rate = gen_rate(r["timer"], res)
            if rate is not None:
                m.setdefault(metric, []).append(rate)
            m.setdefault(metric + "_tokens", []).append(res[TIMER_TOKENS[r["timer"]]])
            if metric == "mtp" and res.get("drafted"):
                m.setdefault("mtp_acceptance", []).append(res["accepted"] / res["drafted"])
    return {e: {k: summary(v) for k, v in ms.items()} for e, ms in samples.items()}


def main():
    if sys.argv[1:2] == ["parse-peer-stderr"]:
        _, _, path, timer = sys.argv
        res = parse_peer_stderr(Path(path).read_text(errors="replace"), timer)
        if res is None:
            sys.exit(1)
        print(json.dumps(res))
        return
    ap = argparse.ArgumentParser()
    for a in ("raw", "out", "prompt", "peer-src", "peer-commit", "llama-mtp-args", "llama-mtp-tool",
              "llama-complete-tool", "nextn-commit", "weight-types"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--drafts", type=int, required=True)
    ap.add_argument("--gen-tokens", type=int, required=True)
    a = ap.parse_args()
    raw = Path(a.raw)
    runs = [json.loads(line) for line in (raw / "runs.jsonl").read_text().splitlines() if line.strip()]
    collected = collect(runs)
    gen_keys = ("greedy_tokens", "mtp_tokens", "mtp_acceptance")  # the rest are tokens/s
    stats = {e: {k: v for k, v in ms.items() if k not in gen_keys} for e, ms in collected.items()}
    gen = {e: {k: v for k, v in ms.items() if k in gen_keys} for e, ms in collected.items()}
    wts = a.weight_types.split()
    texts = {"nextn-greedy": (raw / "text-nextn-greedy.txt").read_text(), "nextn-mtp": (raw / "text-nextn-mtp.txt").read_text()}
    for wt in wts:
        for d in ("greedy", "mtp"):
            texts[f"llama-{wt}-{d}"] = (raw / f"text-llama-{wt}-{d}.txt").read_text()
    if not wts:
        print("cpu_peer_report: no peer runs (NEXTN_ONLY): nextn's side only, no ratios")
    ref = texts["nextn-greedy"]
    by_start = {f"llama-{wt}-mtp" for wt in wts} if a.llama_mtp_tool in OVERSHOOTING_TOOLS else set()
    equal = {k: v.startswith(ref) if k in by_start else v == ref for k, v in texts.items()}
    first_difference = {}
    for k, v in texts.items():
        if not equal[k]:
            i = next((i for i, (x, y) in enumerate(zip(ref, v)) if x != y), min(len(ref), len(v)))
            first_difference[k] = {"char": i, "nextn": ref[max(0, i - 30):i + 30], "this": v[max(0, i - 30):i + 30]}
    nextn_tokens = len(json.loads((raw / "nextn-none.json").read_text())["tokens"])

    ratios = {}
    for metric, target in TARGETS.items():  # greedy: no target, shown for the MTP ratio's sake
        ours = (stats.get("nextn", {}).get(metric) or {}).get("median")
        peers = [(stats.get(f"llama-{wt}", {}).get(metric) or {}).get("median") for wt in wts]
        peers = [p for p in peers if p]
        if ours and peers:
            best = max(peers)
            ratios[metric] = {"nextn": ours, "peer_best": best, "ratio": ours / best, "target": target,
                              "met": None if target is None else ours / best >= target}
    machine = next((r["result"].get("machine") for r in runs if r["engine"] == "nextn" and r["kind"] == "bench"), None)
    timers = {"nextn": "generate --json stats.decode_ms (after the prefill step: prompt, first token, MTP seeded) "
                       "over stats.generated - 1 tokens",
              "peer_greedy": f"{a.llama_complete_tool} perf print: eval time (single-token decodes) + sampling time, "
                             "over eval's runs",
              "peer_mtp": ("llama-speculative-simple: 'decoded N tokens in T seconds' (the decode loop after the "
                           "prompt, its first token included)") if a.llama_mtp_tool == "llama-speculative-simple"
              else f"none ({a.llama_mtp_tool} has no MTP decode timer: column left empty)"}
    if not wts:
        timers["peer_greedy"] = timers["peer_mtp"] = "no peer runs (NEXTN_ONLY)"
    doc = {"prompt": a.prompt, "threads": a.threads, "mtp_drafts": a.drafts, "generated_tokens": a.gen_tokens,
           "generation_timers": timers, "nextn_greedy_tokens_before_eos": nextn_tokens, "peer_src": a.peer_src, "peer_commit": a.peer_commit,
           "peer_greedy_tool": a.llama_complete_tool, "peer_mtp_tool": a.llama_mtp_tool, "peer_mtp_args": a.llama_mtp_args, "nextn_commit": a.nextn_commit,
           "repeats": max(r["repeat"] for r in runs), "text_equal_to_nextn_greedy": equal,
           "text_first_difference": first_difference, "tokens_per_second": stats,
           "generation_tokens_and_acceptance": gen, "ratios": ratios, "machine": machine}
    Path(a.out + ".json").write_text(json.dumps(doc, indent=1) + "\n")

    def cell(s):
        return f"{s['median']:.1f} [{s['min']:.1f}, {s['max']:.1f}]" if s else "n/a"

    def acc(s):
        return f"{s['median']:.3f}" if s else "n/a"

    n = a.gen_tokens
    engines = ["nextn"] + [f"llama-{wt}" for wt in wts]
    lines = [f"# CPU peer: nextn vs llama.cpp ({a.threads} threads)", "",
             f"Model: the default model (nextn: safetensors bf16; llama.cpp: GGUF {', '.join(wts)} converted by its own "
             f"convert_hf_to_gguf.py, MTP head included). Peer: `{a.peer_src}` at `{a.peer_commit}`; nextn at "
             f"`{a.nextn_commit}`. Engines alternated, {doc['repeats']} repeats, order flipped every other repeat; "
             "tokens/s, median [min, max].", "",
             f"| engine | decode 128 (bench) | prefill 512 (bench) | greedy gen {n} (CLI, decode timer) | "
             f"MTP gen {n} (CLI, decode timer) | MTP acceptance |", "|---|---:|---:|---:|---:|---:|"]
    for e in engines:
        s, g = stats.get(e, {}), gen.get(e, {})
        lines.append(f"| {e} | {cell(s.get('decode128'))} | {cell(s.get('prefill512'))} | {cell(s.get('greedy'))} | "
                     f"{cell(s.get('mtp'))} | {acc(g.get('mtp_acceptance'))} |")
    lines += ["", "| nextn / peer's best weight type (issue 27) | nextn | peer best | ratio | target | met |",
              "|---|---:|---:|---:|---:|---|"]
    for metric, r in ratios.items():
        target = f"{r['target']}x" if r["target"] is not None else "none"
        met = "-" if r["met"] is None else "yes" if r["met"] else "NO"
        lines.append(f"| {LABELS[metric]} | {r['nextn']:.1f} | {r['peer_best']:.1f} | {r['ratio']:.2f}x | {target} | {met} |")
    eos_note = ("" if nextn_tokens >= n else
                f" nextn's greedy text reaches EOS after {nextn_tokens} tokens, before the {n} timed: past it the "
                "engines' --ignore-eos differ (nextn keeps the EOS and goes on, llama.cpp masks it), so the timed "
                "tokens, and the MTP acceptances, are not the same there; choose a PROMPT without an early EOS.")
    lines += ["", f"Greedy text for `{a.prompt}`, up to {n} tokens or EOS ({nextn_tokens} nextn tokens), equal to "
              "nextn's plain greedy text: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in equal.items()) + "."
              + eos_note, "",
              *[f"First difference of {k}, character {d['char']}: nextn `{d['nextn']!r}`, {k} `{d['this']!r}`." + "\n"
                for k, d in first_difference.items()],
              f"Decode and prefill: `nextn bench decode --threads {a.threads} -n 128 --prompt-len 1 --prefill-len 512` vs "
              f"`llama-bench -t {a.threads} -p 512 -n 128`.", "",
              f"Generation: each CLI with the prompt above, `-n {n} --ignore-eos`, MTP with {a.drafts} drafts "
              f"(nextn `--block-size {a.drafts + 1}`, peer `{a.llama_mtp_tool} {a.llama_mtp_args}`"
              + (f"; {a.llama_mtp_tool} gives up to {a.drafts + 1} tokens more than its -n, and its text is equal "
                 "when it starts with nextn's" if a.llama_mtp_tool in OVERSHOOTING_TOOLS else "")
              + "), timed inside each process by the engine's own decode timer, so process start, model load and "
              "the prompt's prefill are left out:", "",
              f"- nextn: {timers['nextn']};",
              f"- peer greedy: {timers['peer_greedy']};",
              f"- peer MTP: {timers['peer_mtp']}.", "",
              "Each miss needs its measured reason written under this line before the record is final.", ""]
    if machine:
        lines += ["Machine: `" + json.dumps(machine)[:400] + "`", ""]
    Path(a.out + ".md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
