#include "bench/stats.h"

#include <fmt/format.h>

#include <algorithm>

namespace nextn::bench {

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = int(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  s.median = v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
  s.min = v.front();
  s.max = v.back();
  return s;
}

std::string format_summary(const Summary& s, int decimals) {
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", s.median, decimals, s.min, decimals, s.max, decimals);
}

nlohmann::ordered_json summary_json(const Summary& s) {
  nlohmann::ordered_json j;
  j["median"] = s.median;
  j["min"] = s.min;
  j["max"] = s.max;
  j["n"] = s.n;
  return j;
}

}  // namespace nextn::bench
