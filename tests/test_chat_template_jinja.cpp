// Unit tests of the Jinja subset. The table in
// tests/fixtures/chat_templates/jinja_cases.json (whitespace control, loop
// variables, namespace, macros, tests, filters, string/dict methods,
// Undefined) was rendered by transformers' own chat-template environment
// (scripts/fixtures/make_chat_fixtures.py); outputs must match exactly, and
// where Jinja raised, nextn must raise too. The hand-written tests below
// cover what only nextn defines: error lines and resource limits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_eval.h"

namespace nextn::jinja {
namespace {

using ojson = nlohmann::ordered_json;

ValueDict context_of(const ojson& j) {
  ValueDict ctx;
  for (auto it = j.begin(); it != j.end(); ++it) ctx.emplace_back(it.key(), Value::from_json(it.value()));
  return ctx;
}

std::string render(const std::string& src, const ojson& ctx = ojson::object(), Limits limits = {}) {
  auto t = parse_template(src, limits.max_depth);
  return render_template(*t, context_of(ctx), limits);
}

std::string error_of(const std::string& src, const ojson& ctx = ojson::object(), Limits limits = {}) {
  try {
    render(src, ctx, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ChatTemplateJinja, MatchesJinjaOnCaseTable) {
  std::ifstream in(std::filesystem::path(NEXTN_FIXTURES) / "chat_templates" / "jinja_cases.json");
  ASSERT_TRUE(in) << "missing tests/fixtures/chat_templates/jinja_cases.json";
  const ojson table = ojson::parse(in);
  const ojson& ctx = table["context"];
  ASSERT_GE(table["cases"].size(), 40u);
  for (const auto& c : table["cases"]) {
    const std::string name = c["name"], src = c["template"];
    if (c.contains("expected")) {
      std::string got;
      try {
        got = render(src, ctx);
      } catch (const Error& e) {
        ADD_FAILURE() << name << ": unexpected error: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << name << "\ntemplate: " << src;
    } else {
      const std::string err = error_of(src, ctx);
      EXPECT_NE(err, "<no error>") << name;
      if (c["error_type"] == "TemplateError") {  // raise_exception: same message
        EXPECT_NE(err.find(c["error"].get<std::string>()), std::string::npos) << name << ": " << err;
      }
    }
  }
}

TEST(ChatTemplateJinja, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(error_of("a\n\n{% if x %}\nb"), "line 4: unexpected end of template, expected 'endif'");
  EXPECT_EQ(error_of("{{ 1 +  }}"), "line 1: unexpected '}}'");
  EXPECT_EQ(error_of("ok\n{% frobnicate %}"), "line 2: unknown or unsupported tag 'frobnicate'");
  EXPECT_EQ(error_of("{{ 'abc }}"), "line 1: unterminated string literal");
  EXPECT_EQ(error_of("x\n{# never closed"), "line 2: unterminated comment");
  EXPECT_EQ(error_of("{% for x in y %}{% endif %}"), "line 1: unknown or unsupported tag 'endif'");
  EXPECT_EQ(error_of("{{ a ? b }}"), "line 1: unexpected character '?'");
}

TEST(ChatTemplateJinja, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(error_of("\n\n{{ raise_exception('bad input') }}"), "line 3: raise_exception: bad input");
  EXPECT_EQ(error_of("{{ missing.attr }}"), "line 1: 'missing' is undefined");
  EXPECT_EQ(error_of("\n{{ 1 // 0 }}"), "line 2: integer division or modulo by zero");
  EXPECT_EQ(error_of("{{ x|nosuchfilter }}"), "line 1: no filter named 'nosuchfilter'");
  EXPECT_EQ(error_of("{{ x is nosuchtest }}"), "line 1: no test named 'nosuchtest'");
  EXPECT_EQ(error_of("{% set x = 1 %}{% set x.y = 2 %}"), "line 1: cannot assign attribute on non-namespace object");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "line 1: macro 'm' takes not more than 1 argument(s)");
}

TEST(ChatTemplateJinja, LimitsStopRunawayTemplates) {
  Limits small;
  small.max_steps = 10000;
  small.max_output_bytes = 1 << 16;
  small.max_depth = 40;
  EXPECT_NE(error_of("{% for i in range(100000) %}x{% endfor %}", {}, small).find("steps"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 1000000 }}", {}, small).find("bytes"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, small).find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}", {}, small).find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(x=0) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}")
                .find("nested deeper"),
            std::string::npos);
  EXPECT_EQ(error_of("{% set ns = namespace(x=0) %}{% set ns.x = [ns] %}"), "line 1: a namespace cannot contain itself");
}

// from_json recurses, so it refuses JSON deeper than Value::kMaxJsonDepth
// instead of overflowing the stack (nlohmann parses and frees iteratively,
// so the deep input itself is safe to build here).
TEST(ChatTemplateJinja, FromJsonRefusesDeepValues) {
  auto nested = [](int levels) {
    return ojson::parse(std::string(size_t(levels), '[') + "1" + std::string(size_t(levels), ']'));
  };
  auto error_from = [](const ojson& j) -> std::string {
    try {
      Value::from_json(j);
    } catch (const Error& e) {
      return e.what();
    }
    return "<no error>";
  };
  EXPECT_EQ(error_from(nested(100000)), "JSON value nested deeper than 128 levels");
  EXPECT_EQ(error_from(ojson{{"a", nested(Value::kMaxJsonDepth)}}), "JSON value nested deeper than 128 levels");
  const Value at_limit = Value::from_json(nested(Value::kMaxJsonDepth));
  EXPECT_EQ(nesting_depth(at_limit, 1000), size_t(Value::kMaxJsonDepth));
  // Scalars at the innermost level add no depth; objects count like arrays.
  ojson deep_dict = 1;
  for (int i = 0; i < Value::kMaxJsonDepth; ++i) deep_dict = ojson{{"k", std::move(deep_dict)}};
  EXPECT_EQ(nesting_depth(Value::from_json(deep_dict), 1000), size_t(Value::kMaxJsonDepth));
  deep_dict = ojson{{"k", std::move(deep_dict)}};
  EXPECT_EQ(error_from(deep_dict), "JSON value nested deeper than 128 levels");
  // Through render_chat: a template variable from a request.
  const ChatTemplate t = parse_chat_template("{{ messages[0].content }}", "inline");
  ChatOptions options;
  options.extra = ojson{{"deep", nested(100000)}};
  EXPECT_THROW(render_chat(t, ojson::parse(R"([{"role":"user","content":"hi"}])"), options), Error);
}

TEST(ChatTemplateJinja, RenderChatChecksItsInputs) {
  const ChatTemplate t = parse_chat_template("{{ messages[0].content }}{{ bos_token }}", "inline",
                                             ojson{{"bos_token", "<s>"}});
  EXPECT_EQ(render_chat(t, ojson::parse(R"([{"role":"user","content":"hi"}])"), {}), "hi<s>");
  EXPECT_THROW(render_chat(t, ojson::parse(R"({"role":"user"})"), {}), Error);
  EXPECT_THROW(render_chat(t, ojson::parse(R"([1])"), {}), Error);
  EXPECT_THROW(render_chat(t, ojson::array(), {}), Error);
  try {
    parse_chat_template("{% if %}", "model/tokenizer_config.json: chat_template");
    ADD_FAILURE() << "no syntax error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "model/tokenizer_config.json: chat_template: chat template: line 1: unexpected '%}'");
  }
}

}  // namespace
}  // namespace nextn::jinja
