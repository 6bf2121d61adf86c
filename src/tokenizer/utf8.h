// UTF-8 helpers the tokenizer shares: validation, code point iteration,
// the lossy decoding Hugging Face uses (Rust's String::from_utf8_lossy), and
// the White_Space property used by added-token lstrip/rstrip.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nextn::tok {

// Byte offset of the first invalid sequence, or npos when `s` is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);

// Decodes the code point at s[i] of valid UTF-8; sets `len` to its byte length.
char32_t decode_utf8_at(std::string_view s, size_t i, size_t& len);

void append_utf8(std::string& out, char32_t cp);

// Each maximal invalid subsequence becomes U+FFFD, as Rust's from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);

// Unicode White_Space (Rust's char::is_whitespace).
bool is_unicode_whitespace(char32_t cp);

}  // namespace nextn::tok
