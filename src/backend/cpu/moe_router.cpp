#include "backend/cpu/moe_router.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace nextn::cpu {

void route_top_k(const float* logits, int E, int k, int32_t* experts, float* weights) {
  if (k < 1 || k > E) fail("internal: route_top_k of {} experts out of {}", k, E);
  float mx = -INFINITY;
  for (int e = 0; e < E; ++e) mx = std::fmax(mx, logits[e]);
  std::vector<float> prob(static_cast<size_t>(E));
  float sum = 0.0f;
  for (int e = 0; e < E; ++e) {
    prob[size_t(e)] = std::exp(logits[e] - mx);
    sum += prob[size_t(e)];
  }
  for (int e = 0; e < E; ++e) prob[size_t(e)] /= sum;
  // k passes of a strict-greater scan: among equal probabilities the first
  // (lowest id) not yet taken wins.
  std::vector<bool> taken(static_cast<size_t>(E), false);
  float top_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!taken[size_t(e)] && (best < 0 || prob[size_t(e)] > prob[size_t(best)])) best = e;
    taken[size_t(best)] = true;
    experts[j] = best;
    weights[j] = prob[size_t(best)];
    top_sum += weights[j];
  }
  for (int j = 0; j < k; ++j) weights[j] /= top_sum;
}

}  // namespace nextn::cpu
