#include "bench/decode_breakdown.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "model/bench_interfaces.h"

namespace nextn::bench {
namespace {

using Timings = std::map<std::string, std::pair<int64_t, double>>;

// A runtime without a probe (the CPU) measures nothing: no timings, no kernels.
Timings timings_of(const ModelRuntime& rt) {
  Timings t;
  if (const RuntimeProbe* probe = find_probe(rt))
    for (const auto& o : probe->op_timings()) t[o.op] = {o.count, o.ms};
  return t;
}

// The probe's work counters (kernels launched, routed-expert bytes read), as doubles for the per-unit division.
struct Counts {
  double kernels = 0, expert_bytes = 0;
  Counts operator-(const Counts& o) const { return {kernels - o.kernels, expert_bytes - o.expert_bytes}; }
};

Counts counts_of(const ModelRuntime& rt) {
  const RuntimeProbe* probe = find_probe(rt);
  if (probe == nullptr) return {};
  return {double(probe->kernels_launched()), double(probe->expert_bytes_read())};
}

// (after - before) / units, as rows sorted by time.
Breakdown difference(const std::string& unit, double units, const Timings& before, const Timings& after,
                     const Counts& counts) {
  Breakdown b;
  b.unit = unit;
  b.units = units;
  b.kernels = counts.kernels / units;
  b.expert_bytes = counts.expert_bytes / units;
  for (const auto& [op, t] : after) {
    auto it = before.find(op);
    const int64_t n = t.first - (it == before.end() ? 0 : it->second.first);
    const double ms = t.second - (it == before.end() ? 0.0 : it->second.second);
    if (n <= 0) continue;
    b.rows.push_back({op, double(n) / units, ms / units});
    b.total_ms += ms / units;
  }
  std::sort(b.rows.begin(), b.rows.end(), [](const BreakdownRow& x, const BreakdownRow& y) { return x.ms > y.ms; });
  return b;
}

struct Run {
  Timings t;
  Counts counts;
  GenerateResult g;
};

Run run_once(ModelRuntime& rt, const std::vector<int32_t>& prompt, int n, const DecodeBenchOptions& o) {
  rt.reset();
  if (RuntimeProbe* probe = find_probe(rt)) probe->clear_op_timings();
  const Counts c0 = counts_of(rt);
  Run r;
  if (o.draft == DraftKind::None) {
    r.g = greedy_generate(rt, prompt, n, /*ignore_eos=*/true);
  } else {
    GenerateOptions spec;
    spec.max_new_tokens = n;
    spec.draft = o.draft;
    spec.block_size = o.block_size;
    spec.draft_vocab = o.draft_vocab;
    spec.ignore_eos = true;
    r.g = generate(rt, prompt, spec);
  }
  r.t = timings_of(rt);
  r.counts = counts_of(rt) - c0;
  return r;
}

}  // namespace

BreakdownReport run_breakdown(const RuntimeFactory& factory, int vocab, const DecodeBenchOptions& o,
                              const RuntimeFactory* long_prompt_factory) {
  BreakdownReport rep;
  const auto prompt = synthetic_prompt(o.prompt_len, vocab);
  const int n = o.max_new_tokens;
  {
    const int cap = runtime_capacity(o.prompt_len, n, o.draft == DraftKind::None ? 1 : o.block_size);
    auto rt = factory(cap);
    (void)run_once(*rt, prompt, n, o);  // captures every graph
    const Run one = run_once(*rt, prompt, 1, o);
    if (one.t.empty()) return rep;  // the backend does not time its operations
    const Run all = run_once(*rt, prompt, n, o);
    rep.measured = true;
    if (o.draft == DraftKind::None) {
      rep.parts.push_back(difference("token", double(n - 1), one.t, all.t, all.counts - one.counts));
    } else {
      const double rounds = double(all.g.stats.counters.rounds - one.g.stats.counters.rounds);
      if (rounds <= 0) fail("bench decode --breakdown: no speculative rounds to measure (-n {})", n);
      rep.parts.push_back(
          difference(fmt::format("round (K = {})", o.block_size), rounds, one.t, all.t, all.counts - one.counts));
    }
  }
  if (o.prefill_len > 0) {
    DecodeBenchOptions greedy = o;
    greedy.draft = DraftKind::None;
    auto rt = (long_prompt_factory ? *long_prompt_factory : factory)(runtime_capacity(o.prefill_len, 2, 1));
    const auto long_prompt = synthetic_prompt(o.prefill_len, vocab);
    (void)run_once(*rt, long_prompt, 1, greedy);
    const Run p = run_once(*rt, long_prompt, 1, greedy);
    rep.parts.push_back(difference(fmt::format("prefill of {} tokens", o.prefill_len), 1.0, {}, p.t, p.counts));
  }
  return rep;
}

std::string breakdown_text(const BreakdownReport& r) {
  if (!r.measured) return "  breakdown: this backend does not time its operations (CUDA only)\n";
  std::string s;
  for (const auto& b : r.parts) {
    s += fmt::format("  breakdown per {} (device time between timing events, no PDL overlap; {:.0f} measured):\n",
                     b.unit, b.units);
    s += fmt::format("    {:<24} {:>10} {:>12} {:>7}\n", "operation", "launches", "us", "share");
    for (const auto& row : b.rows)
      s += fmt::format("    {:<24} {:>10.2f} {:>12.1f} {:>6.1f}%\n", row.op, row.launches, row.ms * 1000.0,
                       b.total_ms > 0 ? 100.0 * row.ms / b.total_ms : 0.0);
    s += fmt::format("    {:<24} {:>10} {:>12.1f}   (kernels launched per {}: {:.1f})\n", "total", "",
                     b.total_ms * 1000.0, b.unit, b.kernels);
    if (b.expert_bytes > 0)
      s += fmt::format("    routed-expert bytes read per {}: {:.1f} MB (counted by the grouped expert kernels)\n", b.unit,
                       b.expert_bytes / 1e6);
  }
  return s;
}

nlohmann::ordered_json breakdown_json(const BreakdownReport& r) {
  nlohmann::ordered_json j;
  j["measured"] = r.measured;
  j["parts"] = nlohmann::ordered_json::array();
  for (const auto& b : r.parts) {
    nlohmann::ordered_json p;
    p["unit"] = b.unit;
    p["units"] = b.units;
    p["total_ms"] = b.total_ms;
    p["kernels"] = b.kernels;
    if (b.expert_bytes > 0) p["expert_bytes"] = b.expert_bytes;
    p["ops"] = nlohmann::ordered_json::array();
    for (const auto& row : b.rows) p["ops"].push_back({{"op", row.op}, {"launches", row.launches}, {"ms", row.ms}});
    j["parts"].push_back(p);
  }
  return j;
}

}  // namespace nextn::bench
