// Reference test: nextn's chat-template renderer against transformers'
// apply_chat_template(..., tokenize=False) on the real Qwen3.5, Gemma 4 and
// Gemma 3 templates (tests/fixtures/chat_templates/, made by
// scripts/fixtures/make_chat_fixtures.py). Rendered strings must be equal
// byte for byte; where transformers raised, nextn must fail with the same
// message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace nextn {
namespace {

using ojson = nlohmann::ordered_json;
const std::filesystem::path kDir = std::filesystem::path(NEXTN_FIXTURES) / "chat_templates";

ojson load_cases() {
  std::ifstream in(kDir / "cases.json");
  if (!in) return ojson::array();
  return ojson::parse(in);
}

TEST(ChatTemplateFixtures, MatchTransformers) {
  const ojson cases = load_cases();
  ASSERT_GE(cases.size(), 300u) << "missing tests/fixtures/chat_templates/cases.json";
  std::map<std::string, ChatTemplate> templates;
  size_t rendered = 0, raised = 0;
  for (const auto& c : cases) {
    const std::string name = c["template"].get<std::string>();
    if (!templates.count(name)) templates.emplace(name, load_chat_template((kDir / name).string()));
    ChatOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    opt.tools = c["tools"];
    opt.extra = c["extra"];
    const std::string label = name + "/" + c["conversation"].get<std::string>() + " agp=" +
                              c["add_generation_prompt"].dump() + " tools=" + (c["tools"].is_null() ? "no" : "yes") +
                              " extra=" + c["extra"].dump();
    if (c.contains("expected")) {
      std::string got;
      try {
        got = render_chat(templates.at(name), c["messages"], opt);
      } catch (const Error& e) {
        ADD_FAILURE() << label << ": unexpected error: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
      ++rendered;
    } else {
      const std::string want = c["error"].get<std::string>();
      try {
        render_chat(templates.at(name), c["messages"], opt);
        ADD_FAILURE() << label << ": expected error: " << want;
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(want), std::string::npos) << label << ": got '" << what << "', want '" << want << "'";
      }
      ++raised;
    }
  }
  EXPECT_GT(rendered, 200u);
  EXPECT_GT(raised, 20u);
}

// The three ways a model directory can carry its template all load.
TEST(ChatTemplateFixtures, LoadsEveryLayout) {
  const ChatTemplate qwen = load_chat_template((kDir / "qwen3_5").string());  // string in tokenizer_config.json
  EXPECT_NE(qwen.origin.find("tokenizer_config.json"), std::string::npos);
  EXPECT_EQ(qwen.special_tokens.value("eos_token", ""), "<|im_end|>");
  EXPECT_FALSE(qwen.special_tokens.contains("bos_token"));  // null in the config
  const ChatTemplate g4 = load_chat_template((kDir / "gemma4").string());  // chat_template.jinja
  EXPECT_NE(g4.origin.find("chat_template.jinja"), std::string::npos);
  EXPECT_EQ(g4.special_tokens.value("bos_token", ""), "<bos>");  // AddedToken dict
  const ChatTemplate g3 = load_chat_template((kDir / "gemma3").string());  // list of {name, template}
  EXPECT_NE(g3.origin.find("[default]"), std::string::npos);
}

}  // namespace
}  // namespace nextn
