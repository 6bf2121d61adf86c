// libFuzzer target: Tokenizer::from_json must either load or throw
// nextn::Error; a tokenizer that loads must encode and decode any valid
// UTF-8 text and stream-decode any ids without crashing. Input:
// tokenizer.json text, optionally followed by a NUL byte and a text to
// encode (the NUL never occurs in valid JSON).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string json = in.substr(0, nul);
  const std::string text = nul == std::string::npos ? "Hello, world! <|im_start|> 123 \xc3\xa9" : in.substr(nul + 1);
  try {
    const auto t = nextn::tok::Tokenizer::from_json(json, "tokenizer.json");
    if (nextn::tok::find_invalid_utf8(text) != std::string::npos) return 0;
    const auto ids = t.encode(text);
    const std::string full = t.decode(ids);
    nextn::tok::StreamDecoder s(t);
    std::string streamed;
    for (int32_t id : ids) streamed += s.step(id);
    streamed += s.finish();
    // Arbitrary ids (incomplete byte sequences, specials) decode too.
    std::vector<int32_t> probe;
    for (unsigned char c : text) probe.push_back(int32_t(c) % (t.id_limit() + 1));
    t.decode(probe, {.skip_special_tokens = true});
    (void)full;
    (void)streamed;
  } catch (const nextn::Error&) {
  }
  return 0;
}
