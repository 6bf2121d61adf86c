// The distribution tests of sampled generation (tests/test_sampled_speculative.cpp,
// tests/test_server_engine_gemma4.cpp): the exact distribution of the first
// tokens of plain sampling, by enumerating every continuation, and Pearson's
// chi-square of observed tuples against it.
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "model/runtime.h"
#include "sampling/sampling.h"

namespace nextn::test {

using TupleDistribution = std::map<std::vector<int32_t>, double>;
using TupleCounts = std::map<std::vector<int32_t>, int>;

// P(x_0 .. x_{depth-1}) of plain sampling after `prompt`: every prefix of
// the support, one fresh prefill each on `rt` (reset before each).
inline TupleDistribution exact_sampling_distribution(ModelRuntime& rt, const std::vector<int32_t>& prompt,
                                                     const SamplingParams& params, int depth) {
  const int V = rt.vocab();
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> p;
  std::vector<int32_t> scratch;
  TupleDistribution level = {{{}, 1.0}};
  for (int d = 0; d < depth; ++d) {
    TupleDistribution deeper;
    for (const auto& [prefix, mass] : level) {
      rt.reset();
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), prefix.begin(), prefix.end());
      rt.target_forward(seq);
      rt.head_logits(int(seq.size()) - 1, logits.data());
      sampling_distribution(logits, params, p, scratch);
      for (int v = 0; v < V; ++v)
        if (p[size_t(v)] > 0) {
          auto longer = prefix;
          longer.push_back(v);
          deeper[longer] = mass * p[size_t(v)];
        }
    }
    level = std::move(deeper);
  }
  return level;
}

// Pearson's chi-square against `expected` (probabilities); cells expecting
// fewer than 5 counts are pooled into one. Returns {statistic, degrees of freedom}.
inline std::pair<double, int> chi_square(const TupleDistribution& expected, const TupleCounts& counts, int runs) {
  double stat = 0, pooled_e = 0;
  int pooled_o = 0, cells = 0, seen = 0;
  for (const auto& [key, prob] : expected) {
    const double e = prob * runs;
    const auto it = counts.find(key);
    const int o = it == counts.end() ? 0 : it->second;
    seen += o;
    if (e < 5) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++cells;
  }
  pooled_o += runs - seen;  // tuples outside the support (impossible under the exact rule)
  if (pooled_e > 0) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  } else if (pooled_o > 0) {
    stat = INFINITY;
  }
  return {stat, cells - 1};
}

// The chi-square quantile at p = 1e-3 (Wilson-Hilferty), the pass threshold.
inline double chi_square_limit(int df) {
  const double z = 3.090;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

}  // namespace nextn::test
