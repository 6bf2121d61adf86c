#include "speculative/acceptance.h"

#include <algorithm>

namespace nextn {

Acceptance accept_greedy(std::span<const int32_t> drafts, std::span<const int32_t> picks) {
  Acceptance a;
  while (a.accepted < int(drafts.size()) && drafts[size_t(a.accepted)] == picks[size_t(a.accepted)]) ++a.accepted;
  a.next = picks[size_t(a.accepted)];
  return a;
}

Acceptance accept_sampled(std::span<const int32_t> drafts, std::span<const std::vector<double>> q,
                          const TargetRow& target_row, SamplingRng& rng, AcceptRule rule) {
  Acceptance a;
  std::vector<double> p, residual;
  for (; a.accepted < int(drafts.size()); ++a.accepted) {
    const std::vector<double>& qi = q[size_t(a.accepted)];
    target_row(a.accepted, p);
    const int32_t d = drafts[size_t(a.accepted)];
    // Accept with probability min(1, p/q): u * q < p (q(d) > 0: d was drawn from q).
    if (rng.uniform() * qi[size_t(d)] < p[size_t(d)]) continue;
    if (rule == AcceptRule::Exact) {
      residual.resize(p.size());
      double mass = 0;
      for (size_t v = 0; v < p.size(); ++v) mass += residual[v] = std::max(0.0, p[v] - qi[v]);
      a.next = sample_index(mass > 0 ? std::span<const double>(residual) : std::span<const double>(p), rng);
    } else {
      a.next = sample_index(p, rng);
    }
    return a;
  }
  target_row(int(drafts.size()), p);  // every draft kept: the bonus from the last row
  a.next = sample_index(p, rng);
  return a;
}

}  // namespace nextn
