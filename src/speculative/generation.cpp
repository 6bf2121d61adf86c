#include "speculative/generation.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "model/runtime.h"

namespace nextn {

const char* draft_kind_name(DraftKind d) {
  switch (d) {
    case DraftKind::None: return "none";
    case DraftKind::Mtp: return "mtp";
    case DraftKind::Oracle: return "oracle";
  }
  return "?";
}

DraftKind parse_draft_kind(const std::string& name) {
  for (DraftKind d : {DraftKind::None, DraftKind::Mtp, DraftKind::Oracle})
    if (name == draft_kind_name(d)) return d;
  fail("--draft '{}': separate drafter checkpoints are not supported yet (expected none, mtp or oracle)", name);
}

const char* block_policy_name(BlockPolicy p) { return p == BlockPolicy::Auto ? "auto" : "fixed"; }

const char* draft_cost_name(DraftCost c) {
  return c == DraftCost::Mtp ? "mtp" : c == DraftCost::Drafter ? "drafter" : "free";
}

DraftCost parse_draft_cost(const std::string& name) {
  if (name == "free") return DraftCost::Free;
  if (name == "mtp") return DraftCost::Mtp;
  fail("--draft-cost '{}': expected free or mtp", name);
}

int draft_vocab_from_flag(DraftKind draft, bool given, int n) {
  if (!given) return 0;
  if (n < 1) fail("--draft-vocab {}: expected a token count of at least 1", n);
  if (draft != DraftKind::Mtp) fail("--draft-vocab applies to --draft mtp only");
  return n;
}

int default_block_size(int mtp_layers) { return std::clamp(mtp_layers + 2, kMinBlockSize, kMaxBlockSize); }

int resolve_block_size(BlockPolicy policy, int given, int fixed_default) {
  return given != 0 ? given : policy == BlockPolicy::Auto ? kAutoMaxBlockSize : fixed_default;
}

double GenerateStats::tokens_per_second() const {
  return generated > 1 && decode_ms > 0 ? double(generated - 1) / (decode_ms / 1000.0) : 0.0;
}

double GenerateStats::prefill_tokens_per_second() const {
  return prefill_ms > 0 ? double(prompt_tokens) / (prefill_ms / 1000.0) : 0.0;
}

int runtime_capacity(int prompt_tokens, int max_new_tokens, int block_size) {
  // Summed in 64 bits: -n near INT_MAX must be an error, not a signed overflow.
  const int64_t cap = int64_t(prompt_tokens) + std::max(0, max_new_tokens) + std::max(1, block_size) + 1;
  if (cap > INT_MAX)
    fail("{} prompt tokens + {} new tokens + a verify block of {} need {} positions, more than a runtime holds ({})",
         prompt_tokens, max_new_tokens, block_size, cap, INT_MAX);
  return int(cap);
}

void check_generate_request(const ModelInfo& info, std::span<const int32_t> prompt, const GenerateOptions& o) {
  if (prompt.empty()) fail("the prompt is empty: give at least one token");
  if (o.max_new_tokens < 0) fail("-n {} is negative", o.max_new_tokens);
  if (o.prefill_chunk < 1) fail("--prefill-chunk {}: a step forwards at least one prompt token", o.prefill_chunk);
  for (int32_t t : prompt)
    if (t < 0 || t >= info.vocab_size) fail("prompt token id {} is outside the vocabulary [0, {})", t, info.vocab_size);
  if (o.draft_vocab != 0 && o.draft != DraftKind::Mtp) fail("--draft-vocab applies to --draft mtp only");
  if (o.draft != DraftKind::None && o.block_size != 0) check_block_size(o.block_size);
  if (o.draft == DraftKind::Oracle) check_oracle_spec(o.oracle);
  if (o.draft == DraftKind::Oracle && o.draft_cost == DraftCost::Mtp && info.mtp_layers == 0)
    fail("--draft-cost mtp: the checkpoint has no MTP head (0 MTP layers)");
  if (o.draft == DraftKind::Mtp && info.mtp_layers == 0)
    fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  check_sampling_params(o.sampling);
  if (!o.sampling.greedy() && o.draft == DraftKind::Oracle) fail("sampling supports the drafters none and mtp");
}

nlohmann::ordered_json stats_json(const GenerateStats& s) {
  const VerifyCounters& c = s.counters;
  nlohmann::ordered_json j;
  j["rounds"] = c.rounds;
  j["drafted"] = c.drafted;
  j["accepted"] = c.accepted;
  j["accepted_at"] = c.accepted_at;
  j["rows_projected"] = c.rows_projected;
  j["head_bytes_read"] = c.head_bytes_read;
  j["logits_bytes_written"] = c.logits_bytes_written;
  j["walk_rows"] = c.walk_rows;
  j["head_calls"] = c.head_calls;
  j["walk_steps"] = c.walk_steps;
  j["head_paths"] = c.paths;
  j["block_size"] = c.block_size;
  j["block_policy"] = s.block_policy;
  j["rounds_at_block_size"] = s.rounds_at_block;
  j["verify_requested"] = c.verify_requested;
  j["verify_chosen"] = c.verify_chosen;
  j["verify_taken"] = c.verify_taken;
  if (c.verify_chosen == "pad") j["pad_width"] = c.pad_width;
  if (!s.auto_source.empty()) j["auto_source"] = s.auto_source;
  if (!s.auto_reason.empty()) j["auto_reason"] = s.auto_reason;
  // Greedy verify rounds only: sampled rounds read logits, no arm identity applies.
  if (c.verify_chosen != "none" && c.verify_chosen != "sampled") j["identity_violations"] = counter_violations(c);
  j["tokens_per_second"] = s.tokens_per_second();
  j["draft"] = s.draft;
  if (s.draft == "oracle") j["draft_cost"] = s.draft_cost;
  if (s.draft_vocab > 0) j["draft_vocab"] = s.draft_vocab;
  j["mtp_work"] = {{"entries", s.mtp_work.entries},
                   {"chained_steps", s.mtp_work.chained_steps},
                   {"argmax_rows", s.mtp_work.argmax_rows}};
  j["acceptance"] = c.drafted > 0 ? double(c.accepted) / double(c.drafted) : 0.0;
  j["tokens_per_round"] = c.rounds > 0 ? double(s.generated - 1) / double(c.rounds) : 0.0;
  j["prompt_tokens"] = s.prompt_tokens;
  j["generated"] = s.generated;
  j["stop"] = s.stop;
  j["prefill_tokens_per_second"] = s.prefill_tokens_per_second();
  j["prefill_ms"] = s.prefill_ms;
  j["decode_ms"] = s.decode_ms;
  j["round_ms"] = c.rounds > 0 ? s.round_ms / double(c.rounds) : 0.0;
  j["verify_ms"] = c.rounds > 0 ? s.verify_ms / double(c.rounds) : 0.0;
  j["draft_ms"] = c.rounds > 0 ? s.draft_ms / double(c.rounds) : 0.0;
  j["rollback_ms"] = c.rounds > 0 ? s.rollback_ms / double(c.rounds) : 0.0;
  return j;
}

}  // namespace nextn
