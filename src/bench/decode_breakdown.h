// `nextn bench decode --breakdown`: where a decode step's device time goes,
// by operation class, from the runtime's own timing events (CUDA:
// RuntimeOptions::profile, events between the operations of every captured
// graph; see RuntimeProbe::op_timings). Per generated token for plain greedy,
// per round for MTP speculative decoding, per prompt for a long prefill. The
// decode part is the difference of two runs on one runtime, N tokens and 1
// token, so the prompt and the first head call cancel out.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/decode_bench.h"
#include "model/runtime.h"

namespace nextn::bench {

struct BreakdownRow {
  std::string op;
  double launches = 0;  // intervals per unit (token, round or prefill)
  double ms = 0;        // device ms per unit
};

struct Breakdown {
  std::string unit;            // "token", "round" or "prefill of N tokens"
  double units = 0;            // tokens, rounds or prefills measured
  std::vector<BreakdownRow> rows;  // by time, largest first
  double total_ms = 0;         // their sum per unit
  double kernels = 0;          // kernel launches per unit (graph kernel nodes)
  double expert_bytes = 0;     // routed-expert bytes read per unit (MoE; RuntimeProbe::expert_bytes_read)
};

struct BreakdownReport {
  bool measured = false;  // false: the backend does not time its operations
  std::vector<Breakdown> parts;
};

// Runs the breakdown runs on runtimes from the factories, which the caller
// builds with RuntimeOptions::profile on (a runtime without timings gives
// measured = false).
BreakdownReport run_breakdown(const RuntimeFactory& factory, int vocab, const DecodeBenchOptions& o,
                              const RuntimeFactory* long_prompt_factory = nullptr);  // as run_decode_bench's
std::string breakdown_text(const BreakdownReport& r);
nlohmann::ordered_json breakdown_json(const BreakdownReport& r);

}  // namespace nextn::bench
