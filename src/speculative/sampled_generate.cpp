#include "speculative/sampled_generate.h"

#include <algorithm>

#include "core/error.h"
#include "model/runtime.h"
#include "speculative/drafter.h"
#include "speculative/round_times.h"

namespace nextn {
namespace {

using Clock = RoundClock;

// One target or drafter row turned into its sampling distribution.
struct RowSampler {
  const SamplingParams& params;
  std::vector<float> logits;
  std::vector<int32_t> scratch;
  RowSampler(const SamplingParams& p, int vocab) : params(p), logits(size_t(vocab)) {}
  void target(ModelRuntime& rt, int row, std::vector<double>& probs) {
    rt.head_logits(row, logits.data());
    sampling_distribution(logits, params, probs, scratch);
  }
  void draft(Drafter& drafter, std::vector<double>& probs) {
    drafter.draft_logits(logits.data());
    sampling_distribution(logits, params, probs, scratch);
  }
};

}  // namespace

GenerateResult sampled_generate(ModelRuntime& rt, std::span<const int32_t> prompt, const SampledOptions& o) {
  if (o.draft != DraftKind::None && o.draft != DraftKind::Mtp) fail("sampling supports the drafters none and mtp");
  if (o.draft_vocab != 0 && o.draft != DraftKind::Mtp) fail("--draft-vocab applies to --draft mtp only");
  if (o.draft == DraftKind::None) return sampled_generate(rt, nullptr, prompt, o);
  // The restricted head's logits are -inf past the prefix: q is then exactly
  // the distribution the drafts are drawn from, and the rule stays lossless.
  rt.set_draft_vocab(o.draft_vocab);
  MtpDrafter drafter(rt);  // begin/commit keep the MTP entries paired with the committed text
  GenerateResult r = sampled_generate(rt, &drafter, prompt, o);
  r.stats.draft_vocab = rt.draft_vocab();
  return r;
}

GenerateResult sampled_generate(ModelRuntime& rt, Drafter* drafter, std::span<const int32_t> prompt,
                                const SampledOptions& o) {
  check_sampling_params(o.sampling);
  if (o.sampling.greedy()) fail("internal: sampled_generate needs temperature > 0 (greedy runs generate())");
  if (rt.target_length() != 0) fail("internal: generation needs a fresh runtime (target_length {})", rt.target_length());
  if (prompt.empty()) fail("the prompt is empty: give at least one token");
  if (o.max_new_tokens < 0) fail("max_tokens {} is negative", o.max_new_tokens);
  for (int32_t t : prompt)
    if (t < 0 || t >= rt.vocab()) fail("prompt token id {} is outside the vocabulary [0, {})", t, rt.vocab());
  const bool speculative = drafter != nullptr;
  const int K = speculative ? (o.block_size == 0 ? default_block_size(rt.info().mtp_layers) : o.block_size) : 1;
  if (speculative) check_block_size(K);
  std::vector<int> eos_ids;
  if (!o.ignore_eos) eos_ids = rt.info().eos_token_ids;
  auto eos = [&](int32_t t) { return std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end(); };

  GenerateResult res;
  GenerateStats& s = res.stats;
  VerifyCounters& c = s.counters;
  s.draft = speculative ? drafter->name() : "none";
  s.prompt_tokens = int(prompt.size());
  c.block_size = K;
  c.vocab = rt.vocab();
  c.accepted_at.assign(size_t(K - 1), 0);
  c.verify_requested = c.verify_chosen = c.verify_taken = speculative ? "sampled" : "none";
  const int n = o.max_new_tokens;
  if (n == 0) return res;

  SamplingRng rng(o.sampling.seed);
  RowSampler rows(o.sampling, rt.vocab());
  std::vector<double> p, residual;
  auto commit = [&](std::span<const int32_t> tokens, int first_row, bool& done) {
    size_t kept = 0;  // tokens after an EOS are dropped
    while (kept < tokens.size()) {
      const int32_t t = tokens[kept++];
      res.tokens.push_back(t);
      if (eos(t)) {
        done = true;
        s.stop = "eos";
        break;
      }
    }
    if (int(res.tokens.size()) >= n) done = true;
    if (o.sink && !o.sink(tokens.first(kept), first_row)) {
      if (!done) s.stop = "sink";
      done = true;
    }
  };

  const auto t0 = Clock::now();
  rt.target_forward(prompt);
  rows.target(rt, int(prompt.size()) - 1, p);
  int32_t bonus = sample_index(p, rng);
  bool done = false;
  commit({&bonus, 1}, int(prompt.size()) - 1, done);
  if (!done && speculative) drafter->begin(prompt, bonus);
  const auto t1 = Clock::now();
  s.prefill_ms = ms_between(t0, t1);

  std::vector<std::vector<double>> q(static_cast<size_t>(K));
  std::vector<int32_t> drafts, block, round;
  while (!done) {
    const int W = std::min(K, n - int(res.tokens.size()));
    const auto r0 = Clock::now();
    drafts.clear();
    for (int i = 0; i + 1 < W; ++i) {
      if (i > 0) drafter->draft_step(drafts.back());
      rows.draft(*drafter, q[size_t(i)]);
      drafts.push_back(sample_index(q[size_t(i)], rng));
    }
    block.assign(1, bonus);
    block.insert(block.end(), drafts.begin(), drafts.end());
    const auto r1 = Clock::now();
    rt.target_forward(block);
    int accepted = 0;
    int32_t next = -1;
    for (; accepted < int(drafts.size()); ++accepted) {
      const auto& qi = q[size_t(accepted)];
      rows.target(rt, accepted, p);
      const int32_t d = drafts[size_t(accepted)];
      // Accept with probability min(1, p/q): u * q < p (q(d) > 0: d was drawn from q).
      if (rng.uniform() * qi[size_t(d)] < p[size_t(d)]) continue;
      if (o.rule == AcceptRule::Exact) {
        residual.resize(p.size());
        double mass = 0;
        for (size_t v = 0; v < p.size(); ++v) mass += residual[v] = std::max(0.0, p[v] - qi[v]);
        next = sample_index(mass > 0 ? std::span<const double>(residual) : std::span<const double>(p), rng);
      } else {
        next = sample_index(p, rng);
      }
      break;
    }
    if (next < 0) {  // every draft accepted: the bonus from the last row
      rows.target(rt, int(drafts.size()), p);
      next = sample_index(p, rng);
    }
    const auto r2 = Clock::now();
    ++c.rounds;
    c.drafted += W - 1;
    c.accepted += accepted;
    for (int i = 0; i < accepted; ++i) ++c.accepted_at[size_t(i)];
    round.assign(drafts.begin(), drafts.begin() + accepted);
    round.push_back(next);
    commit(round, 0, done);
    rt.target_rollback(accepted + 1);
    if (!done && speculative) drafter->commit(drafts, accepted, next);
    bonus = next;
    add_round_times(s, r0, r1, r2, Clock::now());
  }
  s.decode_ms = ms_between(t1, Clock::now());
  s.generated = int(res.tokens.size());
  return res;
}

}  // namespace nextn
