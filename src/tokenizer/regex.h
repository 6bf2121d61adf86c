// A compiled PCRE2 pattern (UTF + UCP: \p{L}, \s etc. follow Unicode) with
// the match iteration Hugging Face's Oniguruma binding uses.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nextn::tok {

class Regex {
 public:
  // Throws nextn::Error "`where`: ..." when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) in `text` (valid UTF-8), left to
  // right. An empty match right where the previous match ended is skipped
  // by one character, as onig's find_iter does.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string where_;
};

}  // namespace nextn::tok
