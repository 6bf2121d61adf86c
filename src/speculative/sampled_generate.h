// Generation at temperature > 0: plain sampling, or lossless speculative
// sampling with a drafter that drafts for sampling: the MTP head, or the
// Gemma 4 assistant (docs/server.md, "Sampling").
//
// Speculative round (K = block size, W = min(K, tokens left)):
//   draft   for i < W-1: q_i = the sampling distribution of the drafter's
//           logits (Drafter::draft_logits), d_i ~ q_i, then one chained
//           draft step on d_i (not after the last);
//   verify  one target forward over [bonus, d_0 .. d_{W-2}]; p_i = the
//           sampling distribution of target row i;
//   accept  d_i with probability min(1, p_i(d_i) / q_i(d_i)), in order; at
//           the first rejection draw the next token from
//           norm(max(0, p_i - q_i)) and stop; if every draft is accepted
//           draw the bonus from p_{W-1}.
// Each committed token is then distributed exactly as plain sampling from p
// would give it (Leviathan et al. 2023; Chen et al. 2023), so the output
// distribution is the same with and without the drafter, though the random
// draws (and so a seeded sequence) differ between the two.
#pragma once
#include <cstdint>
#include <span>

#include "sampling/sampling.h"
#include "speculative/generate.h"

namespace nextn {

// The acceptance rule. Exact is the lossless rule above; ResampleFromTarget
// (on a rejection draw from p instead of the residual) is a known-biased
// variant kept so the distribution test can show that it detects a wrong rule.
enum class AcceptRule { Exact, ResampleFromTarget };

struct SampledOptions {
  int max_new_tokens = 32;
  SamplingParams sampling;  // temperature > 0
  DraftKind draft = DraftKind::None;  // None or Mtp
  int block_size = 0;                 // 0: default_block_size(MTP layers)
  int draft_vocab = 0;                // Mtp: drafts drawn from ids [0, draft_vocab) only; 0: all
  bool ignore_eos = false;
  AcceptRule rule = AcceptRule::Exact;
  TokenSink sink;  // optional, as in GenerateOptions
};

// On a fresh runtime (target_length() == 0). Stats as generate() reports
// them (rounds, drafted, accepted, accepted_at; arm "sampled").
GenerateResult sampled_generate(ModelRuntime& rt, std::span<const int32_t> prompt, const SampledOptions& options);
// The same with any drafter (nullptr: plain sampling; options.draft is then
// ignored). options.block_size 0 is the MTP default.
GenerateResult sampled_generate(ModelRuntime& rt, Drafter* drafter, std::span<const int32_t> prompt,
                                const SampledOptions& options);

}  // namespace nextn
