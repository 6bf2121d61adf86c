// `nextn bench decode`: prefill and decode rates through the production
// generate path, plain greedy or MTP-speculative (--draft mtp), medians
// [min, max] over repeats (after one discarded warm-up run), each run on a
// fresh runtime, EOS ignored.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "engine/generate.h"

namespace nextn::bench {

struct DecodeBenchOptions {
  int prompt_len = 64;
  int max_new_tokens = 64;
  int repeats = 5;
  int prefill_len = 0;  // > 0: also time prefill of a prompt this long (separate runs, 2 tokens each)
  DraftKind draft = DraftKind::None;  // None or Mtp
  int block_size = 0;                 // Mtp: verify width K (resolved by the caller, >= 2)
  int draft_vocab = 0;                // Mtp: drafts over ids [0, draft_vocab) (--draft-vocab); 0: all
};

struct DecodeBenchReport {
  std::vector<double> prefill_tps, decode_tps, prefill_ms, decode_ms_per_token, decode_ms_per_round;
  Summary prefill, decode, prefill_time, per_token, per_round;  // per_round: decode ms / rounds (Mtp)
  int generated = 0;
  int64_t drafted = 0, accepted = 0;  // Mtp: totals over the timed repeats
  std::vector<double> long_prefill_tps, long_prefill_ms;  // prefill_len runs
  Summary long_prefill, long_prefill_time;
};

// A deterministic synthetic prompt of `len` ids inside [0, vocab).
std::vector<int32_t> synthetic_prompt(int len, int vocab);

// long_prompt_factory: the factory for the --prefill-len runs (a runtime built for
// the rows a long prompt's last chunk uses; `factory` when null).
DecodeBenchReport run_decode_bench(const RuntimeFactory& factory, int vocab, const DecodeBenchOptions& o,
                                   const RuntimeFactory* long_prompt_factory = nullptr);
std::string decode_table_text(const DecodeBenchReport& r, const DecodeBenchOptions& o);
nlohmann::ordered_json decode_report_json(const DecodeBenchReport& r, const DecodeBenchOptions& o);

}  // namespace nextn::bench
