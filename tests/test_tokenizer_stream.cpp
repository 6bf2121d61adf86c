// Streaming decode holds back a character whose UTF-8 bytes span several
// tokens, emits it whole once complete (a ByteFallback byte run once it
// ends), and turns incomplete leftovers into U+FFFD at finish(), as a full
// decode does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nextn::tok {
namespace {

Tokenizer load(const std::string& kind) {
  return Tokenizer::load(std::string(NEXTN_FIXTURES) + "/tokenizers/" + kind + "/tokenizer.json");
}

int32_t id_of(const Tokenizer& t, const std::string& token) {
  auto id = t.token_to_id(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(0);
}

TEST(TokenizerStream, ByteFallbackRunIsHeldUntilItEnds) {
  const Tokenizer t = load("gemma3");
  // U+1F600 is not in the small vocabulary: four <0xNN> byte tokens, held
  // until the run ends (a later byte could still make it invalid).
  const std::vector<int32_t> ids = {id_of(t, "a"),      id_of(t, "<0xF0>"), id_of(t, "<0x9F>"),
                                    id_of(t, "<0x98>"), id_of(t, "<0x80>"), id_of(t, "b")};
  StreamDecoder s(t);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(s.step(id));
  EXPECT_EQ(out, (std::vector<std::string>{"a", "", "", "", "", "\xF0\x9F\x98\x80"
                                                                "b"}));
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(t.decode(ids),
            "a\xF0\x9F\x98\x80"
            "b");
  // A valid byte (B) followed by one that makes the run invalid: the whole
  // run decodes as U+FFFDs, so B must not have been emitted on its own.
  const std::vector<int32_t> bad = {id_of(t, "a"), id_of(t, "<0x42>"), id_of(t, "<0xE9>"), id_of(t, "b")};
  StreamDecoder s2(t);
  std::string streamed;
  for (int32_t id : bad) streamed += s2.step(id);
  streamed += s2.finish();
  EXPECT_EQ(streamed, t.decode(bad));
  EXPECT_EQ(streamed, "a\xEF\xBF\xBD\xEF\xBF\xBD"
                      "b");
}

TEST(TokenizerStream, ByteLevelCharacterIsHeldUntilComplete) {
  const Tokenizer t = load("qwen35");
  // The ByteLevel chars of U+20AC's bytes E2 82 AC, one token each.
  const std::vector<int32_t> ids = {id_of(t, "x"), id_of(t, "\xC3\xA2"), id_of(t, "\xC4\xA4"), id_of(t, "\xC2\xAC")};
  StreamDecoder s(t);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(s.step(id));
  EXPECT_EQ(out, (std::vector<std::string>{"x", "", "", "\xE2\x82\xAC"}));
}

TEST(TokenizerStream, IncompleteLeftoversBecomeReplacementCharacters) {
  const Tokenizer gemma = load("gemma3");
  StreamDecoder g(gemma);
  EXPECT_EQ(g.step(id_of(gemma, "a")), "a");
  EXPECT_EQ(g.step(id_of(gemma, "<0xE2>")), "");
  EXPECT_EQ(g.step(id_of(gemma, "<0x82>")), "");
  // ByteFallback: one U+FFFD per byte of an invalid run.
  EXPECT_EQ(g.finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(gemma.decode({id_of(gemma, "a"), id_of(gemma, "<0xE2>"), id_of(gemma, "<0x82>")}),
            "a\xEF\xBF\xBD\xEF\xBF\xBD");

  const Tokenizer qwen = load("qwen35");
  StreamDecoder q(qwen);
  EXPECT_EQ(q.step(id_of(qwen, "\xC3\xA2")), "");
  EXPECT_EQ(q.step(id_of(qwen, "\xC4\xA4")), "");
  // ByteLevel: one U+FFFD per maximal invalid subsequence (E2 82).
  EXPECT_EQ(q.finish(), "\xEF\xBF\xBD");
}

TEST(TokenizerStream, Utf8Lossy) {
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), "\xEF\xBF\xBD");                              // truncated: one
  EXPECT_EQ(utf8_lossy("\xE2\x82x"), "\xEF\xBF\xBDx");                            // cut short: one
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong: each byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: each byte
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // > U+10FFFF
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace nextn::tok
