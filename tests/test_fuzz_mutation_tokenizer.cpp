// The tokenizer.json counterpart of test_fuzz_mutation.cpp: every seed in
// fuzz/corpus/tokenizer_json gets thousands of seeded random mutations (bit
// flips, truncations, JSON and tokenizer-specific token insertions, range
// deletes and copies, number edits). Each must load or throw nextn::Error
// with one line starting with the file name; what loads must encode,
// decode and stream-decode without any other failure. scripts/fuzz.sh runs
// the coverage-guided version (fuzz/fuzz_tokenizer_json.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace nextn::tok {
namespace {

namespace fs = std::filesystem;
constexpr int kMutationsPerSeed = 1500;
const char* const kFile = "mutant/tokenizer.json";

std::vector<std::pair<std::string, std::string>> load_seeds() {
  std::vector<std::pair<std::string, std::string>> seeds;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(NEXTN_SOURCE_DIR) / "fuzz" / "corpus" / "tokenizer_json", ec)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    seeds.emplace_back(e.path().filename().string(), s.substr(0, s.find('\0')));  // the JSON part
  }
  std::sort(seeds.begin(), seeds.end());
  return seeds;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  void mutate(std::string& s) {
    const int n = 1 + int(below(3));
    for (int i = 0; i < n; ++i) mutate_once(s);
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  size_t pos(const std::string& s) { return size_t(below(s.size() + 1)); }

  void mutate_once(std::string& s) {
    static const char* const kTokens[] = {"{",
                                          "}",
                                          "[",
                                          "]",
                                          ",",
                                          ":",
                                          "\"",
                                          "\\",
                                          " ",
                                          "-1",
                                          "0",
                                          "1",
                                          "7",
                                          "2147483647",
                                          "2147483648",
                                          "1e999",
                                          "null",
                                          "true",
                                          "false",
                                          "[]",
                                          "{}",
                                          "\"type\"",
                                          "\"BPE\"",
                                          "\"Split\"",
                                          "\"ByteLevel\"",
                                          "\"Sequence\"",
                                          "\"Replace\"",
                                          "\"NFC\"",
                                          "\"NFKD\"",
                                          "\"Prepend\"",
                                          "\"Strip\"",
                                          "\"Metaspace\"",
                                          "\"prepend_scheme\":\"first\"",
                                          "\"split\":false",
                                          "\"Fuse\"",
                                          "\"ByteFallback\"",
                                          "\"TemplateProcessing\"",
                                          "\"Regex\"",
                                          "\"String\"",
                                          "\"(\"",
                                          "\"(a+)+$\"",
                                          "\"\\\\p{L}+\"",
                                          "\"(?=a)\"",
                                          "\"\"",
                                          "\"<0x41>\"",
                                          "\"<0xC3>\"",
                                          "\"<0x+A>\"",
                                          "\"merges\"",
                                          "\"vocab\"",
                                          "\"added_tokens\"",
                                          "\"content\"",
                                          "\"id\"",
                                          "\"lstrip\":true",
                                          "\"rstrip\":true",
                                          "\"single_word\":true",
                                          "\"normalized\":true",
                                          "\"special\":true",
                                          "\"behavior\":\"Removed\"",
                                          "\"behavior\":\"Contiguous\"",
                                          "\"behavior\":\"MergedWithNext\"",
                                          "\"invert\":true",
                                          "\"byte_fallback\":true",
                                          "\"fuse_unk\":true",
                                          "\"ignore_merges\":true",
                                          "\"unk_token\":\"<unk>\"",
                                          "\"continuing_subword_prefix\":\"##\"",
                                          "\"end_of_word_suffix\":\"</w>\"",
                                          "\"use_regex\":true",
                                          "\"add_prefix_space\":true",
                                          "\"\\u0000\"",
                                          "\"\\ud800\"",
                                          "\xff",
                                          "\xc3\xa9",
                                          "\xe2\x96\x81",
                                          "\"h e\"",
                                          "[\"h\",\"e\"]",
                                          "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\"},\"behavior\":\"Isolated\"}",
                                          "{\"type\":\"Strip\",\"content\":\" \",\"start\":3,\"stop\":9}"};
    switch (below(8)) {
      case 0:
        if (!s.empty()) s[size_t(below(s.size()))] ^= char(1u << below(8));
        break;
      case 1:
        s.resize(size_t(below(s.size() + 1)));
        break;
      case 2:
      case 3: {
        const std::string tok = kTokens[below(sizeof kTokens / sizeof kTokens[0])];
        s.insert(pos(s), tok);
        break;
      }
      case 4: {
        if (s.empty()) break;
        const size_t p = size_t(below(s.size()));
        s.erase(p, std::min(size_t(1 + below(24)), s.size() - p));
        break;
      }
      case 5: {  // copy a range elsewhere (duplicate keys, entries, merges)
        if (s.empty()) break;
        const size_t p = size_t(below(s.size()));
        const std::string chunk = s.substr(p, size_t(1 + below(96)));
        s.insert(pos(s), chunk);
        break;
      }
      case 6: {  // replace a number
        std::vector<size_t> starts;
        for (size_t i = 1; i < s.size(); ++i)
          if (s[i] >= '0' && s[i] <= '9' && (s[i - 1] < '0' || s[i - 1] > '9')) starts.push_back(i);
        if (starts.empty()) break;
        size_t p = starts[below(starts.size())], e = p;
        while (e < s.size() && s[e] >= '0' && s[e] <= '9') ++e;
        static const char* const kNums[] = {
            "0", "1", "2", "3", "65", "255", "4294967295", "2147483648", "99999999999999999999"};
        s.replace(p, e - p, below(2) ? kNums[below(sizeof kNums / sizeof kNums[0])] : std::to_string(below(80)));
        break;
      }
      default: {  // swap two string literals' contents by copying one over another
        std::vector<size_t> quotes;
        for (size_t i = 0; i < s.size(); ++i)
          if (s[i] == '"') quotes.push_back(i);
        if (quotes.size() < 4) break;
        const size_t a = quotes[below(quotes.size() - 1)], b = quotes[below(quotes.size() - 1)];
        const size_t ae = s.find('"', a + 1), be = s.find('"', b + 1);
        if (ae == std::string::npos || be == std::string::npos) break;
        const std::string src = s.substr(a, ae - a + 1);
        s.replace(b, be - b + 1, src);
        break;
      }
    }
  }
  std::mt19937_64 rng_;
};

TEST(FuzzMutation, TokenizerJsonOnlyThrowsError) {
  const auto seeds = load_seeds();
  ASSERT_GE(seeds.size(), 4u) << "seed corpus missing: fuzz/corpus/tokenizer_json";
  const std::vector<std::string> texts = {"", "Hello, world! 123", "h\xc3\xa9llo  \r\n\t x<|im_start|>y<think>",
                                          "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 \xe2\x96\x81 AAA"};
  size_t loaded = 0, errors = 0;
  uint64_t seed_no = 0;
  for (const auto& [name, seed] : seeds) {
    Mutator m(0x70CE11u + seed_no++);
    for (int i = 0; i < kMutationsPerSeed; ++i) {
      std::string s = seed;
      m.mutate(s);
      try {
        const Tokenizer t = Tokenizer::from_json(s, kFile);
        ++loaded;
        for (const auto& text : texts) {
          const auto ids = t.encode(text);
          for (int32_t id : ids) ASSERT_TRUE(t.has_token(id)) << name << " #" << i << ": id " << id;
          const std::string full = t.decode(ids);
          StreamDecoder sd(t);
          std::string streamed;
          for (int32_t id : ids) streamed += sd.step(id);
          (void)(streamed + sd.finish());
          (void)full;
        }
        std::vector<int32_t> any;
        for (int32_t k = 0; k < 40; ++k) any.push_back(k * 7 % (t.id_limit() + 3));
        t.decode(any, {.skip_special_tokens = true});
      } catch (const Error& e) {
        ++errors;
        const std::string msg = e.what();
        ASSERT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
        // Load errors name the file; an encode-time regex failure names it too.
        ASSERT_EQ(msg.rfind(kFile, 0), 0u) << "message does not start with the file name: " << msg;
      } catch (const std::exception& e) {
        FAIL() << "seed " << name << " mutation #" << i << " threw a non-Error exception: " << e.what()
               << "\ninput: " << s;
      }
    }
  }
  EXPECT_GT(loaded, 0u);
  EXPECT_GT(errors, 0u);
  std::printf("[ stats    ] %zu inputs: %zu loaded, %zu errors\n", loaded + errors, loaded, errors);
}

}  // namespace
}  // namespace nextn::tok
