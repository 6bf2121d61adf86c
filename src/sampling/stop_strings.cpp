#include "sampling/stop_strings.h"

#include <algorithm>

namespace nextn {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::feed(const std::string& text) {
  if (stopped_) return "";
  held_ += text;
  // The earliest complete match ends the output.
  size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > hold; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

}  // namespace nextn
