#include "speculative/generate.h"

#include <algorithm>
#include <climits>
#include <chrono>

#include "core/error.h"
#include "model/runtime.h"
#include "speculative/round_times.h"

namespace nextn {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

void check_start(const ModelRuntime& rt, std::span<const int32_t> prompt, int max_new_tokens) {
  if (rt.target_length() != 0) fail("internal: generation needs a fresh runtime (target_length {})", rt.target_length());
  if (prompt.empty()) fail("the prompt is empty: give at least one token");
  if (max_new_tokens < 0) fail("-n {} is negative", max_new_tokens);
  for (int32_t t : prompt)
    if (t < 0 || t >= rt.vocab()) fail("prompt token id {} is outside the vocabulary [0, {})", t, rt.vocab());
}

struct Eos {
  std::vector<int> ids;
  bool operator()(int32_t t) const { return std::find(ids.begin(), ids.end(), t) != ids.end(); }
};

Eos eos_of(const ModelRuntime& rt, bool ignore_eos) {
  Eos e;
  if (!ignore_eos) e.ids = rt.info().eos_token_ids;
  return e;
}

// Prefill: the prompt forward and the first token.
int32_t prefill(ModelRuntime& rt, std::span<const int32_t> prompt) {
  rt.target_forward(prompt);
  int32_t first = 0;
  rt.head_argmax(int(prompt.size()) - 1, 1, 1, &first);
  return first;
}

}  // namespace

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

const char* draft_cost_name(DraftCost c) { return c == DraftCost::Mtp ? "mtp" : "free"; }

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

double GenerateStats::tokens_per_second() const {
  return generated > 1 && decode_ms > 0 ? double(generated - 1) / (decode_ms / 1000.0) : 0.0;
}

double GenerateStats::prefill_tokens_per_second() const {
  return prefill_ms > 0 ? double(prompt_tokens) / (prefill_ms / 1000.0) : 0.0;
}

GenerateResult greedy_generate(ModelRuntime& rt, std::span<const int32_t> prompt, int max_new_tokens, bool ignore_eos,
                               const TokenSink& sink) {
  check_start(rt, prompt, max_new_tokens);
  const Eos eos = eos_of(rt, ignore_eos);
  GenerateResult res;
  GenerateStats& s = res.stats;
  s.prompt_tokens = int(prompt.size());
  s.counters.block_size = 1;
  s.counters.vocab = rt.vocab();
  s.counters.verify_requested = s.counters.verify_chosen = s.counters.verify_taken = "none";
  if (max_new_tokens == 0) return res;
  const auto t0 = Clock::now();
  int32_t tok = prefill(rt, prompt);
  const auto t1 = Clock::now();
  s.prefill_ms = ms_since(t0, t1);
  res.tokens.push_back(tok);
  bool stopped = sink && !sink({&tok, 1}, int(prompt.size()) - 1);
  const HeadWork before = rt.head_work();
  while (!stopped && !eos(tok) && int(res.tokens.size()) < max_new_tokens) {
    rt.target_forward({&tok, 1});
    rt.head_argmax(0, 1, 1, &tok);
    res.tokens.push_back(tok);
    ++s.counters.rounds;
    stopped = sink && !sink({&tok, 1}, 0);
  }
  const HeadWork after = rt.head_work();  // copied from the runtime, as the verifier does
  s.counters.rows_projected = after.rows_projected - before.rows_projected;
  s.counters.head_bytes_read = after.head_bytes_read - before.head_bytes_read;
  s.counters.logits_bytes_written = after.logits_bytes_written - before.logits_bytes_written;
  s.counters.head_calls = after.head_calls - before.head_calls;
  s.decode_ms = s.round_ms = s.verify_ms = ms_since(t1, Clock::now());
  s.generated = int(res.tokens.size());
  s.stop = eos(tok) ? "eos" : stopped ? "sink" : "budget";
  return res;
}

GenerateResult speculative_generate(ModelRuntime& rt, Drafter& drafter, std::span<const int32_t> prompt,
                                    const GenerateOptions& o) {
  check_start(rt, prompt, o.max_new_tokens);
  const int K = o.block_size;
  check_block_size(K);
  const int pad = o.verify == VerifyArm::Pad ? resolve_pad_width(K, o.pad_width) : 0;
  Verifier verifier(o.verify, pad, read_fault_hook());
  const Eos eos = eos_of(rt, o.ignore_eos);
  const int n = o.max_new_tokens;

  GenerateResult res;
  GenerateStats& s = res.stats;
  VerifyCounters& c = s.counters;
  s.draft = drafter.name();
  s.prompt_tokens = int(prompt.size());
  s.auto_source = o.auto_source;
  s.auto_reason = o.auto_reason;
  s.draft_cost = draft_cost_name(o.draft_cost);
  c.block_size = K;
  c.pad_width = pad;
  c.vocab = rt.vocab();
  c.accepted_at.assign(size_t(K - 1), 0);
  c.verify_requested = o.chosen_by_auto ? "auto" : verify_arm_name(o.verify);
  c.verify_chosen = verify_arm_name(verifier.arm());  // auto's recorded choice, or the arm asked for
  c.verify_taken = "none";                            // what the runtime's head paths say, once a round ran
  if (n == 0) return res;

  const auto t0 = Clock::now();
  int32_t bonus = prefill(rt, prompt);
  res.tokens.push_back(bonus);
  bool done = eos(bonus) || n == 1;
  if (eos(bonus)) s.stop = "eos";
  if (o.sink && !o.sink({&bonus, 1}, int(prompt.size()) - 1)) {
    if (!done) s.stop = "sink";
    done = true;
  }
  if (!done) drafter.begin(prompt, bonus);
  const auto t1 = Clock::now();
  s.prefill_ms = ms_since(t0, t1);
  const MtpWork mtp_before = rt.mtp_work();

  std::vector<int32_t> drafts, block;
  block.reserve(size_t(K));
  while (!done) {
    const int W = std::min(K, n - int(res.tokens.size()));
    const auto r0 = Clock::now();
    drafter.propose(W - 1, drafts);
    if (int(drafts.size()) != W - 1) fail("internal: drafter {} proposed {} of {} tokens", drafter.name(), drafts.size(), W - 1);
    block.assign(1, bonus);
    block.insert(block.end(), drafts.begin(), drafts.end());
    const auto r1 = Clock::now();
    rt.target_forward(block);
    const VerifyOutcome v = verifier.verify(rt, drafts);
    const auto r2 = Clock::now();

    ++c.rounds;
    c.drafted += W - 1;
    c.accepted += v.accepted;
    for (int i = 0; i < v.accepted; ++i) ++c.accepted_at[size_t(i)];
    c.rows_projected += v.rows_projected;
    c.head_bytes_read += v.head_bytes_read;
    c.logits_bytes_written += v.logits_bytes_written;
    c.walk_rows += v.walk_rows;
    c.head_calls += v.head_calls;
    c.walk_steps += v.walk_steps;
    const std::string path = head_path_name(v.path);
    if (std::find(c.paths.begin(), c.paths.end(), path) == c.paths.end()) c.paths.push_back(path);
    // The arm the runtime's paths say ran; a mix of paths is "mixed".
    const std::string taken = v.taken == VerifyArm::Auto ? std::string("none") : verify_arm_name(v.taken);
    c.verify_taken = c.rounds == 1 || c.verify_taken == taken ? taken : "mixed";
    for (const std::string& msg : v.violations) {
      ++c.round_violation_count;
      if (c.round_violations.size() < 20) c.round_violations.push_back(fmt::format("round {}: {}", c.rounds, msg));
    }

    const size_t round_start = res.tokens.size();
    for (int i = 0; i <= v.accepted && !done; ++i) {
      const int32_t t = i < v.accepted ? drafts[size_t(i)] : v.next;
      res.tokens.push_back(t);
      if (eos(t)) {
        done = true;
        s.stop = "eos";
      }
    }
    if (int(res.tokens.size()) >= n) done = true;
    // Rows 0..a of this verify forward produced the round's tokens.
    if (o.sink && !o.sink(std::span<const int32_t>(res.tokens).subspan(round_start), 0)) {
      if (!done) s.stop = "sink";
      done = true;
    }
    rt.target_rollback(v.accepted + 1);
    if (!done) drafter.commit(drafts, v.accepted, v.next);
    bonus = v.next;
    add_round_times(s, r0, r1, r2, Clock::now());
  }
  s.decode_ms = ms_since(t1, Clock::now());
  s.generated = int(res.tokens.size());
  const MtpWork mtp_after = rt.mtp_work();
  s.mtp_work.entries = mtp_after.entries - mtp_before.entries;
  s.mtp_work.chained_steps = mtp_after.chained_steps - mtp_before.chained_steps;
  s.mtp_work.argmax_rows = mtp_after.argmax_rows - mtp_before.argmax_rows;
  return res;
}

GenerateResult generate(ModelRuntime& rt, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const std::vector<int32_t>* oracle_truth) {
  if (options.draft_vocab != 0 && options.draft != DraftKind::Mtp) fail("--draft-vocab applies to --draft mtp only");
  if (options.draft == DraftKind::None)
    return greedy_generate(rt, prompt, options.max_new_tokens, options.ignore_eos, options.sink);
  GenerateOptions o = options;
  // Qwen35Checkpoint::open sets the config's count to the checkpoint's, as the CLI reads it.
  if (o.block_size == 0) o.block_size = default_block_size(rt.info().mtp_layers);
  if (o.draft == DraftKind::Mtp) {
    rt.set_draft_vocab(o.draft_vocab);
    MtpDrafter d(rt);
    GenerateResult r = speculative_generate(rt, d, prompt, o);
    r.stats.draft_vocab = rt.draft_vocab();
    return r;
  }
  if (oracle_truth == nullptr) fail("internal: the oracle drafter needs the greedy output first");
  if (o.draft_cost == DraftCost::Mtp) {
    if (rt.info().mtp_layers == 0)
      fail("--draft-cost mtp: the checkpoint has no MTP head (0 MTP layers)");
    rt.set_draft_vocab(0);  // the cost of the whole head's chain, whatever the runtime was set to
    OracleAtMtpCostDrafter d(rt, *oracle_truth, o.oracle);
    return speculative_generate(rt, d, prompt, o);
  }
  OracleDrafter d(*oracle_truth, o.oracle, rt.vocab());
  return speculative_generate(rt, d, prompt, o);
}

int runtime_capacity(int prompt_tokens, int max_new_tokens, int block_size) {
  // Summed in 64 bits: -n near INT_MAX must be an error, not a signed overflow.
  const int64_t cap = int64_t(prompt_tokens) + std::max(0, max_new_tokens) + std::max(1, block_size) + 1;
  if (cap > INT_MAX)
    fail("{} prompt tokens + {} new tokens + a verify block of {} need {} positions, more than a runtime holds ({})",
         prompt_tokens, max_new_tokens, block_size, cap, INT_MAX);
  return int(cap);
}

GenerateResult generate_fresh(const RuntimeFactory& factory, std::span<const int32_t> prompt,
                              const GenerateOptions& options) {
  const int cap = runtime_capacity(int(prompt.size()), options.max_new_tokens,
                                   options.block_size == 0 ? kMaxBlockSize : options.block_size);
  std::vector<int32_t> truth;
  auto rt = factory(cap);
  if (options.draft == DraftKind::Oracle) {
    check_oracle_spec(options.oracle);
    truth = greedy_generate(*rt, prompt, options.max_new_tokens, options.ignore_eos).tokens;
    rt->reset();
  }
  return generate(*rt, prompt, options, options.draft == DraftKind::Oracle ? &truth : nullptr);
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
  j["verify_requested"] = c.verify_requested;
  j["verify_chosen"] = c.verify_chosen;
  j["verify_taken"] = c.verify_taken;
  if (c.verify_chosen == "pad") j["pad_width"] = c.pad_width;
  if (!s.auto_source.empty()) j["auto_source"] = s.auto_source;
  if (!s.auto_reason.empty()) j["auto_reason"] = s.auto_reason;
  if (c.verify_chosen != "none") j["identity_violations"] = counter_violations(c);
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
