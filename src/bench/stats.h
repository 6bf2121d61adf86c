// Medians and dispersion over repeated runs.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nextn::bench {

struct Summary {
  double median = 0, min = 0, max = 0;
  int n = 0;
};

// Median (mean of the middle two for an even count), min, max. Empty: n = 0.
Summary summarize(std::vector<double> samples);
// "12.3 [11.9, 12.8]" with `decimals` places.
std::string format_summary(const Summary& s, int decimals);
nlohmann::ordered_json summary_json(const Summary& s);

}  // namespace nextn::bench
