// Acceptance: which drafts of a verify round the target keeps, on the host,
// from the rows the engine step computed (docs/speculative.md).
//
// Greedy: the longest prefix of drafts equal to the target's argmax picks,
// plus the target's pick at the first row past it. The output is then plain
// greedy's, bit for bit.
//
// Sampled (Leviathan et al. 2023; Chen et al. 2023): draft d_i, drawn from
// the drafter's distribution q_i, is kept with probability
// min(1, p_i(d_i) / q_i(d_i)) in order (p_i: the target row's sampling
// distribution); at the first rejection the next token is drawn from
// norm(max(0, p_i - q_i)) and the round stops; if every draft is kept the
// bonus is drawn from p_W-1. Each committed token is then distributed exactly
// as plain sampling from p would give it, though a seeded sequence differs
// from plain sampling's.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sampling/sampling.h"

namespace nextn {

struct Acceptance {
  int accepted = 0;  // drafts kept
  int32_t next = 0;  // the target's token after them (correction or bonus)
};

// picks: the target's argmax of rows 0..drafts.size() (at least the rows up
// to the first mismatch; an early-exit head fills no more).
Acceptance accept_greedy(std::span<const int32_t> drafts, std::span<const int32_t> picks);

// The acceptance rule. Exact is the lossless rule above; ResampleFromTarget
// (on a rejection draw from p instead of the residual) is a known-biased
// variant kept so the distribution test can show that it detects a wrong rule.
enum class AcceptRule { Exact, ResampleFromTarget };

// target_row(i, p) writes the target's sampling distribution of verify row i
// into p; q[i] is the distribution d_i was drawn from.
using TargetRow = std::function<void(int row, std::vector<double>& p)>;
Acceptance accept_sampled(std::span<const int32_t> drafts, std::span<const std::vector<double>> q,
                          const TargetRow& target_row, SamplingRng& rng, AcceptRule rule);

}  // namespace nextn
