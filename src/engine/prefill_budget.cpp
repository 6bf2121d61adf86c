#include "engine/prefill_budget.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace nextn {

void check_prefill_stall(double stall) {
  if (!(stall == 0 || (stall > 1 && std::isfinite(stall))))
    fail("--prefill-stall {}: a step may cost its decode rows' time times a finite factor above 1 (0: off)", stall);
}

int prompt_rows_within(const CostModelChooser& cost, double stall, int decode_sequences, int decode_rows,
                       int prompt_sequences, int most) {
  const double budget = stall * cost.predicted_ms(decode_sequences, decode_rows, 0, 0);
  const int sequences = decode_sequences + prompt_sequences;
  const auto fits = [&](int prompt_rows) {
    return cost.prompt_scale() * cost.predicted_ms(sequences, decode_rows + prompt_rows, 0, 0) <= budget;
  };
  // The step time grows with its rows: the largest that fits, by bisection.
  int lo = 0, hi = std::max(0, most);
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace nextn
