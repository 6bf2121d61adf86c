#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {

namespace {
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "unknown PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}
// Bounds for hostile patterns (the file is untrusted): a pattern that
// backtracks past these fails with an error instead of hanging.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kDepthLimit = 100'000;
}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* mctx = nullptr;
};

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(std::make_unique<Impl>()), where_(where) {
  if (find_invalid_utf8(pattern) != std::string::npos) fail("{}: the pattern is not valid UTF-8", where);
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                              &off, nullptr);
  if (!impl_->code) fail("{}: the regex does not compile at offset {}: {}", where, off, pcre2_message(err));
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is used if JIT fails
  impl_->mctx = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(impl_->mctx, kMatchLimit);
  pcre2_set_depth_limit(impl_->mctx, kDepthLimit);
}

Regex::~Regex() {
  if (impl_->mctx) pcre2_match_context_free(impl_->mctx);
  if (impl_->code) pcre2_code_free(impl_->code);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  bool have_last_end = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), impl_->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("{}: matching failed: {}", where_, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t s = ov[0], e = ov[1];
    if (s == e && have_last_end && pos == last_end) {
      if (pos >= text.size()) break;
      size_t len = 1;
      decode_utf8_at(text, pos, len);
      pos += len;
      continue;
    }
    out.emplace_back(s, e);
    pos = e;
    have_last_end = true;
    last_end = e;
  }
  return out;
}

}  // namespace nextn::tok
