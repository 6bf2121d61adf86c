// nextn's tokenizer against Hugging Face `tokenizers`: for each committed
// reference tokenizer (tests/fixtures/tokenizers/<kind>/, made by
// scripts/fixtures/make_tokenizer_fixtures.py) every recorded case must
// encode to exactly the recorded ids and decode to exactly the recorded
// text; streaming decode must equal the full decode.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace nextn::tok {
namespace {

std::string fixture(const std::string& kind, const std::string& file) {
  return std::string(NEXTN_FIXTURES) + "/tokenizers/" + kind + "/" + file;
}

nlohmann::json load_cases(const std::string& kind) {
  std::ifstream in(fixture(kind, "cases.json"));
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::string streamed(const Tokenizer& t, const std::vector<int32_t>& ids, DecodeOptions o) {
  StreamDecoder s(t, o);
  std::string out;
  for (int32_t id : ids) out += s.step(id);
  return out + s.finish();
}

// Escaped for failure messages: the cases hold control characters.
std::string show(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, EncodeAndDecodeMatchHuggingFace) {
  const Tokenizer t = Tokenizer::load(fixture(GetParam(), "tokenizer.json"));
  const auto cases = load_cases(GetParam());
  // The metaspace variants record every third case string.
  ASSERT_GE(cases["encode"].size(), GetParam().rfind("metaspace", 0) == 0 ? 800u : 2000u);
  size_t failures = 0;
  for (const auto& c : cases["encode"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    // Fields equal to their default are left out (make_tokenizer_fixtures.py).
    const auto plain = c.value("ids_no_special", c["ids"]).get<std::vector<int32_t>>();
    const std::string want = c.value("decoded", c["text"]), want_skip = c.value("decoded_skip_special", c["text"]);
    const auto got = t.encode(text);
    const auto got_plain = t.encode(text, {.add_special_tokens = false});
    const std::string dec = t.decode(ids), dec_skip = t.decode(ids, {.skip_special_tokens = true});
    const bool ok = got == ids && got_plain == plain && dec == want && dec_skip == want_skip && streamed(t, ids, {}) == dec;
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << GetParam() << ": text " << show(text) << "\n  want ids " << c["ids"].dump() << "\n  got  ids "
                    << nlohmann::json(got).dump() << "\n  want text " << show(want) << "\n  got  text "
                    << show(dec) << "\n  skip-special want " << show(want_skip) << " got "
                    << show(dec_skip) << "\n  streamed " << show(streamed(t, ids, {}));
    }
  }
  EXPECT_EQ(failures, 0u) << "of " << cases["encode"].size() << " encode cases";
}

TEST_P(Reference, DecodeOfRandomIdsMatchesHuggingFace) {
  const Tokenizer t = Tokenizer::load(fixture(GetParam(), "tokenizer.json"));
  const auto cases = load_cases(GetParam());
  size_t failures = 0;
  for (const auto& c : cases["decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const std::string dec = t.decode(ids), dec_skip = t.decode(ids, {.skip_special_tokens = true});
    const std::string want = c["decoded"], want_skip = c.value("decoded_skip_special", want);
    const bool ok = dec == want && dec_skip == want_skip && streamed(t, ids, {}) == dec &&
                    streamed(t, ids, {.skip_special_tokens = true}) == dec_skip;
    if (!ok && ++failures <= 10)
      ADD_FAILURE() << GetParam() << ": ids " << c["ids"].dump() << "\n  want " << show(want) << "\n  got  "
                    << show(dec) << "\n  streamed " << show(streamed(t, ids, {}));
  }
  EXPECT_EQ(failures, 0u) << "of " << cases["decode"].size() << " decode cases";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Reference,
                         ::testing::Values("qwen35", "gemma3", "gemma4", "metaspace", "metaspace_split"));

}  // namespace
}  // namespace nextn::tok
