// Bounded, deterministic fuzzing of the chat-template interpreter without
// libFuzzer: each seed in fuzz/corpus/chat_template gets seeded random
// mutations (byte edits, truncations, spliced Jinja fragments). Each mutant
// must render or throw nextn::Error, nothing else; the ASan/UBSan build
// also catches memory errors. scripts/fuzz.sh runs the coverage-guided
// version (fuzz/fuzz_chat_template.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace nextn {
namespace {

constexpr int kMutationsPerSeed = 300;

const char* const kFragments[] = {
    "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{% for x in messages %}", "{% endfor %}", "{% if x %}",
    "{% endif %}", "{% macro m(a, b=1) %}", "{% endmacro %}", "{{ m(1) }}", "{% set ns = namespace(v=0) %}",
    "{% set ns.v = ns.v + 1 %}", "loop.index0", "|tojson", "|trim", "|length", " is defined", "[::-1]",
    "raise_exception('x')", "messages[0]", ".split('</think>')", "{% break %}", "'", "\"", "(", ")", "[", "]",
    "range(1000000)", "'ab' * 100000", "{% set x %}", "{% endset %}", "**", "//", "~", "\n", "-"};

std::vector<std::string> seeds() {
  std::vector<std::pair<std::string, std::string>> named;
  const auto dir = std::filesystem::path(NEXTN_SOURCE_DIR) / "fuzz" / "corpus" / "chat_template";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    named.emplace_back(e.path().filename().string(), ss.str());
  }
  std::sort(named.begin(), named.end());  // directory order is not deterministic
  std::vector<std::string> out;
  for (auto& [n, s] : named) out.push_back(std::move(s));
  return out;
}

TEST(ChatTemplateMutation, MutantsRenderOrFailCleanly) {
  const auto corpus = seeds();
  ASSERT_GE(corpus.size(), 10u) << "missing fuzz/corpus/chat_template";
  const auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "<think>r</think>ok", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
    {"role": "tool", "content": "out"},
    {"role": "user", "content": [{"type": "text", "text": "bye"}]}])");
  ChatOptions opt;
  opt.add_generation_prompt = true;
  opt.tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":{"name":"f","parameters":{}}}])");
  opt.limits.max_steps = 20000;
  opt.limits.max_output_bytes = 1 << 20;
  opt.limits.max_depth = 64;
  std::mt19937_64 rng(12345);
  size_t rendered = 0, rejected = 0;
  for (const auto& seed : corpus) {
    for (int i = 0; i < kMutationsPerSeed; ++i) {
      std::string s = seed;
      const int edits = 1 + int(rng() % 4);
      for (int k = 0; k < edits; ++k) {
        const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
        switch (rng() % 4) {
          case 0:
            if (!s.empty()) s[std::min(pos, s.size() - 1)] = char(rng() % 256);
            break;
          case 1: s.erase(pos, rng() % 16); break;
          case 2: s.insert(pos, kFragments[rng() % std::size(kFragments)]); break;
          default: s.resize(pos); break;
        }
      }
      try {
        const ChatTemplate t = parse_chat_template(s, "mutant", {{"bos_token", "<s>"}}, opt.limits.max_depth);
        render_chat(t, messages, opt);
        ++rendered;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  // Both outcomes occur: the mutations are neither all fatal nor all harmless.
  EXPECT_GT(rendered, 0u);
  EXPECT_GT(rejected, 0u);
}

}  // namespace
}  // namespace nextn
