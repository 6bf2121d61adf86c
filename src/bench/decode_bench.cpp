#include "bench/decode_bench.h"

#include <fmt/format.h>

#include "core/error.h"

namespace nextn::bench {

std::vector<int32_t> synthetic_prompt(int len, int vocab) {
  std::vector<int32_t> p(size_t(std::max(0, len)));
  for (int i = 0; i < len; ++i) p[size_t(i)] = int32_t((int64_t(i) * 7919 + 13) % vocab);
  return p;
}

DecodeBenchReport run_decode_bench(const RuntimeFactory& factory, int vocab, const DecodeBenchOptions& o,
                                   const RuntimeFactory* long_prompt_factory) {
  if (o.prompt_len < 1) fail("--prompt-len {} must be at least 1", o.prompt_len);
  if (o.max_new_tokens < 2) fail("-n {}: a decode benchmark needs at least 2 tokens", o.max_new_tokens);
  if (o.repeats < 1) fail("--repeats {} must be at least 1", o.repeats);
  if (o.draft == DraftKind::Oracle) fail("--draft oracle: bench decode measures none or mtp");
  if (o.draft == DraftKind::Mtp && o.block_size < 2) fail("--block-size {} must be at least 2", o.block_size);
  const auto prompt = synthetic_prompt(o.prompt_len, vocab);
  const int cap = runtime_capacity(o.prompt_len, o.max_new_tokens, o.draft == DraftKind::None ? 1 : o.block_size);
  GenerateOptions spec;
  spec.max_new_tokens = o.max_new_tokens;
  spec.draft = o.draft;
  spec.block_size = o.block_size;
  spec.draft_vocab = o.draft_vocab;
  spec.ignore_eos = true;
  DecodeBenchReport r;
  for (int rep = -1; rep < o.repeats; ++rep) {  // rep -1: warm-up, discarded
    GenerateResult g;
    {
      auto rt = factory(cap);
      g = o.draft == DraftKind::None ? greedy_generate(*rt, prompt, o.max_new_tokens, /*ignore_eos=*/true)
                                     : generate(*rt, prompt, spec);
    }
    if (rep < 0) continue;
    r.generated = g.stats.generated;
    r.drafted += g.stats.counters.drafted;
    r.accepted += g.stats.counters.accepted;
    r.prefill_tps.push_back(g.stats.prefill_tokens_per_second());
    r.decode_tps.push_back(g.stats.tokens_per_second());
    r.prefill_ms.push_back(g.stats.prefill_ms);
    r.decode_ms_per_token.push_back(g.stats.decode_ms / double(std::max(1, g.stats.generated - 1)));
    r.decode_ms_per_round.push_back(g.stats.decode_ms / double(std::max<int64_t>(1, g.stats.counters.rounds)));
  }
  if (o.prefill_len > 0) {
    const auto long_prompt = synthetic_prompt(o.prefill_len, vocab);
    const int long_cap = runtime_capacity(o.prefill_len, 2, 1);
    for (int rep = 0; rep < o.repeats; ++rep) {
      GenerateResult g;
      {
        auto rt = (long_prompt_factory ? *long_prompt_factory : factory)(long_cap);
        g = greedy_generate(*rt, long_prompt, 2, /*ignore_eos=*/true);
      }
      r.long_prefill_tps.push_back(g.stats.prefill_tokens_per_second());
      r.long_prefill_ms.push_back(g.stats.prefill_ms);
    }
    r.long_prefill = summarize(r.long_prefill_tps);
    r.long_prefill_time = summarize(r.long_prefill_ms);
  }
  r.prefill = summarize(r.prefill_tps);
  r.decode = summarize(r.decode_tps);
  r.prefill_time = summarize(r.prefill_ms);
  r.per_token = summarize(r.decode_ms_per_token);
  r.per_round = summarize(r.decode_ms_per_round);
  return r;
}

std::string decode_table_text(const DecodeBenchReport& r, const DecodeBenchOptions& o) {
  std::string s = fmt::format("median [min, max] over {} repeats (1 warm-up discarded); prompt {} tokens, {} generated\n",
                              o.repeats, o.prompt_len, r.generated);
  s += fmt::format("  prefill tokens/s  {:>32}   ({} ms)\n", format_summary(r.prefill, 1), format_summary(r.prefill_time, 3));
  s += fmt::format("  decode tokens/s   {:>32}   ({} ms/token)\n", format_summary(r.decode, 1),
                   format_summary(r.per_token, 4));
  if (o.draft != DraftKind::None) {
    const std::string subset = o.draft_vocab > 0 ? fmt::format(", draft vocabulary {}", o.draft_vocab) : "";
    s += fmt::format("  draft {}, block size {}{}: accepted {} of {} drafts ({:.3f})\n", draft_kind_name(o.draft),
                     o.block_size, subset, r.accepted, r.drafted,
                     r.drafted ? double(r.accepted) / double(r.drafted) : 0.0);
    s += fmt::format("  ms per round      {:>32}\n", format_summary(r.per_round, 4));
  }
  if (o.prefill_len > 0)
    s += fmt::format("  prefill {} tokens/s {:>{}}   ({} ms; separate runs)\n", o.prefill_len,
                     format_summary(r.long_prefill, 1), std::max<int>(1, 28 - int(std::to_string(o.prefill_len).size())),
                     format_summary(r.long_prefill_time, 3));
  return s;
}

nlohmann::ordered_json decode_report_json(const DecodeBenchReport& r, const DecodeBenchOptions& o) {
  nlohmann::ordered_json j;
  j["settings"] = {{"prompt_len", o.prompt_len}, {"max_new_tokens", o.max_new_tokens}, {"repeats", o.repeats},
                   {"draft", draft_kind_name(o.draft)}};
  if (o.draft != DraftKind::None) {
    j["settings"]["block_size"] = o.block_size;
    if (o.draft_vocab > 0) j["settings"]["draft_vocab"] = o.draft_vocab;
    j["drafted"] = r.drafted;
    j["accepted"] = r.accepted;
    j["acceptance"] = r.drafted ? double(r.accepted) / double(r.drafted) : 0.0;
    j["decode_ms_per_round"] = summary_json(r.per_round);
  }
  j["prefill_tokens_per_second"] = summary_json(r.prefill);
  j["decode_tokens_per_second"] = summary_json(r.decode);
  j["prefill_ms"] = summary_json(r.prefill_time);
  j["decode_ms_per_token"] = summary_json(r.per_token);
  if (o.prefill_len > 0) {
    j["settings"]["prefill_len"] = o.prefill_len;
    j["long_prefill_tokens_per_second"] = summary_json(r.long_prefill);
    j["long_prefill_ms"] = summary_json(r.long_prefill_time);
  }
  return j;
}

}  // namespace nextn::bench
