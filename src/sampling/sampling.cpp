#include "sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace nextn {

void check_sampling_params(const SamplingParams& p) {
  if (!(p.temperature >= 0.0 && p.temperature <= 100.0))
    fail("temperature {} is outside [0, 100]", p.temperature);
  if (p.top_k < 0) fail("top_k {} is negative", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("top_p {} is outside (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) fail("min_p {} is outside [0, 1]", p.min_p);
}

void sampling_distribution(std::span<const float> logits, const SamplingParams& params, std::vector<double>& probs,
                           std::vector<int32_t>& order) {
  const int V = int(logits.size());
  if (V == 0) fail("internal: sampling over an empty vocabulary");
  if (!(params.temperature > 0.0)) fail("internal: sampling_distribution needs temperature > 0");
  probs.assign(size_t(V), 0.0);
  // Candidates by descending logit (ties: smaller id first). Dividing by a
  // positive temperature keeps the order.
  order.resize(size_t(V));
  for (int i = 0; i < V; ++i) order[size_t(i)] = i;
  auto before = [&](int32_t a, int32_t b) {
    const float la = logits[size_t(a)], lb = logits[size_t(b)];
    return la > lb || (la == lb && a < b);
  };
  const int k = params.top_k > 0 && params.top_k < V ? params.top_k : V;
  const bool need_sorted = params.top_p < 1.0;
  if (k < V) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    order.resize(size_t(k));
  } else if (need_sorted) {
    std::sort(order.begin(), order.end(), before);
  }
  // Softmax over the candidates, in double.
  double zmax = -std::numeric_limits<double>::infinity();
  for (int32_t i : order) zmax = std::max(zmax, double(logits[size_t(i)]) / params.temperature);
  if (!std::isfinite(zmax)) fail("the model produced non-finite logits");
  double sum = 0;
  for (int32_t i : order) {
    const double e = std::exp(double(logits[size_t(i)]) / params.temperature - zmax);
    probs[size_t(i)] = e;
    sum += e;
  }
  double pmax = 0;
  for (int32_t i : order) {
    probs[size_t(i)] /= sum;
    pmax = std::max(pmax, probs[size_t(i)]);
  }
  if (params.min_p > 0.0) {
    const double floor = params.min_p * pmax;
    for (int32_t i : order)
      if (probs[size_t(i)] < floor) probs[size_t(i)] = 0.0;
  }
  if (need_sorted) {
    // `order` is sorted by logit, hence by probability; min-p zeroes form a suffix.
    double mass = 0;
    size_t keep = 0;
    while (keep < order.size() && probs[size_t(order[keep])] > 0.0) {
      mass += probs[size_t(order[keep])];
      ++keep;
      if (mass >= params.top_p) break;
    }
    for (size_t j = keep; j < order.size(); ++j) probs[size_t(order[j])] = 0.0;
  }
  double total = 0;
  for (int32_t i : order) total += probs[size_t(i)];
  for (int32_t i : order) probs[size_t(i)] /= total;
}

int32_t sample_index(std::span<const double> weights, SamplingRng& rng) {
  double total = 0;
  int32_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i] > 0.0) {
      total += weights[i];
      last = int32_t(i);
    }
  if (last < 0) fail("internal: sampling from a distribution with no mass");
  const double u = rng.uniform() * total;
  double acc = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    acc += weights[i];
    if (u < acc) return int32_t(i);
  }
  return last;  // u within rounding of the total
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top_n) {
  const int V = int(logits.size());
  if (token < 0 || token >= V) fail("internal: logprob of token {} outside [0, {})", token, V);
  double zmax = -std::numeric_limits<double>::infinity();
  for (float z : logits) zmax = std::max(zmax, double(z));
  double sum = 0;
  for (float z : logits) sum += std::exp(double(z) - zmax);
  const double log_norm = zmax + std::log(sum);
  TokenLogprob r;
  r.token = token;
  r.logprob = double(logits[size_t(token)]) - log_norm;
  const int n = std::clamp(top_n, 0, V);
  if (n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int i = 0; i < V; ++i) ids[size_t(i)] = i;
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (int j = 0; j < n; ++j) r.top.emplace_back(ids[size_t(j)], double(logits[size_t(ids[size_t(j)])]) - log_norm);
  }
  return r;
}

}  // namespace nextn
