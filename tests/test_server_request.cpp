// The request parser of nextn serve (server/request.h): what OpenAI clients
// send is accepted, every bad field is a 400 naming it, a body over the
// limit is a 413, a body nested too deeply is refused while it is parsed,
// and the field whitelist is the table in docs/server.md.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "cli_util.h"
#include "server/http_error.h"
#include "server/request.h"
#include "tokenizer/jinja_value.h"

namespace nextn::server {
namespace {

ServerLimits limits() {
  ServerLimits l;
  l.max_body_bytes = 4096;
  l.max_tokens = 100;
  return l;
}

CompletionRequest completion(const std::string& body) {
  return parse_completion_request(body, Endpoint::Completions, limits());
}
CompletionRequest chat(const std::string& body) {
  return parse_completion_request(body, Endpoint::ChatCompletions, limits());
}

// {status, param} of the refusal, or {0, ""} when accepted.
std::pair<int, std::string> refusal(const std::string& body, Endpoint e = Endpoint::Completions) {
  try {
    parse_completion_request(body, e, limits());
  } catch (const HttpError& err) {
    return {err.status(), err.param()};
  }
  return {0, ""};
}

TEST(ServerRequest, CompletionFieldsAndDefaults) {
  const auto r = completion(R"({"model": "m", "prompt": "def f", "max_tokens": 5, "temperature": 0,
                                "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true},
                                "seed": -3, "logprobs": 2, "top_k": 4, "min_p": 0.1, "top_p": 0.9})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "def f");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_TRUE(r.sampling.greedy());
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, uint64_t(-3));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.sampling.top_k, 4);
  const auto d = completion(R"({"prompt": [1, 2, 3]})");
  EXPECT_TRUE(d.prompt_is_ids);
  EXPECT_EQ(d.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d.max_tokens, 16);  // OpenAI's completions default
  EXPECT_EQ(d.sampling.temperature, 1.0);
  EXPECT_FALSE(d.stream);
  EXPECT_EQ(completion(R"({"prompt": ["one"]})").prompt, "one");
  EXPECT_EQ(completion(R"({"prompt": "x", "stop": "S", "n": 1, "user": "u", "top_k": -1})").stop,
            std::vector<std::string>{"S"});
}

TEST(ServerRequest, ChatMessages) {
  const auto r = chat(R"({"messages": [{"role": "system", "content": "be brief"},
                                       {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
                          "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 7})");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "hi there");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}]})").max_tokens, 100);  // the server's cap
}

TEST(ServerRequest, RefusalsNameTheField) {
  EXPECT_EQ(refusal("{not json"), std::make_pair(400, std::string()));
  EXPECT_EQ(refusal("[1, 2]"), std::make_pair(400, std::string()));
  EXPECT_EQ(refusal(std::string(5000, ' ')).first, 413);
  EXPECT_EQ(refusal(R"({})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": ""})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": ["a", "b"]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [1, -2]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": 5})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 0})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 101})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 1.5})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 18446744073709551615})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": 2.5})").second, "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": "hot"})").second, "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_p": 0})").second, "top_p");
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_k": -5})").second, "top_k");
  EXPECT_EQ(refusal(R"({"prompt": "x", "min_p": 2})").second, "min_p");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": [1]})").second, "stop");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": ["a","b","c","d","e"]})").second, "stop");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": [""]})").second, "stop");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream": "yes"})").second, "stream");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream_options": {"include_usage": true}})").second, "stream_options");
  EXPECT_EQ(refusal(R"({"prompt": "x", "n": 2})").second, "n");
  EXPECT_EQ(refusal(R"({"prompt": "x", "echo": true})").second, "echo");
  EXPECT_EQ(refusal(R"({"prompt": "x", "logprobs": 6})").second, "logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "x", "model": 3})").second, "model");
  EXPECT_EQ(refusal(R"({"prompt": "x", "frequency_penalty": 0.5})").second, "frequency_penalty");
  const Endpoint c = Endpoint::ChatCompletions;
  EXPECT_EQ(refusal(R"({"messages": []})", c).second, "messages");
  EXPECT_EQ(refusal(R"({"messages": [{"content": "x"}]})", c).second, "messages[0].role");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "wizard", "content": "x"}]})", c).second, "messages[0].role");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": 7}]})", c).second, "messages[0].content");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", c).second,
            "messages[0].content[0]");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", c).second,
            "top_logprobs");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", c).second,
            "tools");
}

// {status, param, message} of the refusal under the default limits (1 MiB
// bodies), or {0, "", ""} when accepted.
struct Refusal {
  int status = 0;
  std::string param, message;
};
Refusal refusal_at_default_limits(const std::string& body, Endpoint e) {
  try {
    parse_completion_request(body, e, ServerLimits{});
  } catch (const HttpError& err) {
    return {err.status(), err.param(), err.what()};
  }
  return {};
}

// `levels` arrays around 1.
std::string nested(int levels) { return std::string(size_t(levels), '[') + "1" + std::string(size_t(levels), ']'); }

const std::string kChatStart = R"({"messages": [{"role": "user", "content": "hi"}])";

TEST(ServerRequest, DeepNestingIsRefusedWhileParsing) {
  // The body that crashed the server (SIGSEGV in the recursive copy of the
  // message): 600 KB, a message field of 300,000 nested arrays.
  const std::string crash = R"({"model":"default","messages":[{"role":"user","content":"hi","x":)" +
                            std::string(300000, '[') + std::string(300000, ']') + "}]}";
  ASSERT_GT(crash.size(), 600000u);
  ASSERT_LT(crash.size(), ServerLimits{}.max_body_bytes);
  const Refusal r = refusal_at_default_limits(crash, Endpoint::ChatCompletions);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.param, "messages");
  EXPECT_EQ(r.message, "the request body nests deeper than 64 levels");

  const Endpoint chat = Endpoint::ChatCompletions, completions = Endpoint::Completions;
  const std::string deep = nested(100);
  const std::pair<std::string, Endpoint> cases[] = {
      {kChatStart + R"(, "chat_template_kwargs": {"v": )" + deep + "}}", chat},
      {R"({"prompt": )" + deep + "}", completions},
      {R"({"prompt": "x", "stop": )" + deep + "}", completions},
      {R"({"prompt": "x", "no_such_field": )" + deep + "}", completions},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": )" + deep + "}]}]}", chat},
      {deep, completions},  // the body itself
  };
  for (const auto& [body, endpoint] : cases) {
    const Refusal d = refusal_at_default_limits(body, endpoint);
    EXPECT_EQ(d.status, 400) << body.substr(0, 60);
    EXPECT_EQ(d.message, "the request body nests deeper than 64 levels") << body.substr(0, 60);
  }
  EXPECT_EQ(refusal_at_default_limits(cases[0].first, chat).param, "chat_template_kwargs");
  EXPECT_EQ(refusal_at_default_limits(cases[3].first, completions).param, "no_such_field");
}

TEST(ServerRequest, DepthLimitCountsEveryLevel) {
  // The body's object is level 1, chat_template_kwargs level 2, "v"'s arrays 3 and on.
  auto with_kwargs_arrays = [](int arrays) {
    return kChatStart + R"(, "chat_template_kwargs": {"v": )" + nested(arrays) + "}}";
  };
  const auto r = parse_completion_request(with_kwargs_arrays(62), Endpoint::ChatCompletions, ServerLimits{});
  size_t depth = 0;
  for (const auto* v = &r.chat_template_kwargs["v"]; v->is_array(); v = &(*v)[0]) ++depth;
  EXPECT_EQ(depth, 62u);
  // What the parser lets through converts for the chat template.
  EXPECT_NO_THROW(jinja::Value::from_json(r.chat_template_kwargs));
  EXPECT_EQ(refusal_at_default_limits(with_kwargs_arrays(63), Endpoint::ChatCompletions).message,
            "the request body nests deeper than 64 levels");
  // Objects count as arrays do; the limit is a setting.
  ServerLimits shallow;
  shallow.max_json_depth = 2;
  EXPECT_NO_THROW(
      parse_completion_request(R"({"prompt": "x", "logit_bias": {}, "stop": ["s"]})", Endpoint::Completions, shallow));
  EXPECT_THROW(parse_completion_request(R"({"prompt": [[1]]})", Endpoint::Completions, shallow), HttpError);
  EXPECT_THROW(parse_completion_request(R"({"prompt": "x", "logit_bias": {"a": {}}})", Endpoint::Completions, shallow),
               HttpError);
}

TEST(ServerRequest, ObjectKeysAreBoundedWhileParsing) {
  // ordered_json searches an object's keys on every insert: 100,000 keys in
  // one object took 50 s to parse, so the count is refused as it grows.
  auto kwargs_with_keys = [](int n) {
    std::string keys;
    for (int i = 0; i < n; ++i) keys += fmt::format("{}\"k{}\": {}", i ? ", " : "", i, i);
    return kChatStart + R"(, "chat_template_kwargs": {)" + keys + "}}";
  };
  const Endpoint c = Endpoint::ChatCompletions;
  EXPECT_EQ(parse_completion_request(kwargs_with_keys(256), c, ServerLimits{}).chat_template_kwargs.size(), 256u);
  const Refusal r = refusal_at_default_limits(kwargs_with_keys(257), c);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.param, "chat_template_kwargs");
  EXPECT_EQ(r.message, "an object in the request body has more than 256 keys");
  EXPECT_EQ(refusal_at_default_limits(kwargs_with_keys(50000), c).param, "chat_template_kwargs");
  // Many small objects are fine, and quick: Json::parse's callback variant
  // rescans the parent after each object, which took 215 s on this body.
  std::string objects;
  for (size_t i = 0; objects.size() < 1000000; ++i) objects += i ? ",{}" : "{}";
  EXPECT_EQ(refusal_at_default_limits(R"({"prompt": "x", "stop": [)" + objects + "]}", Endpoint::Completions).param,
            "stop");
}

TEST(ServerRequest, UnknownFieldsAreRefusedByName) {
  const Endpoint c = Endpoint::ChatCompletions;
  EXPECT_EQ(refusal(R"({"prompt": "x", "temprature": 0})"), std::make_pair(400, std::string("temprature")));
  EXPECT_EQ(refusal_at_default_limits(R"({"prompt": "x", "temprature": 0})", Endpoint::Completions).message,
            "Unrecognized request argument supplied: temprature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "repetition_penalty": null})").second, "repetition_penalty");
  // Known to the other endpoint only.
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_logprobs": 2})").second, "top_logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "x", "messages": []})").second, "messages");
  EXPECT_EQ(refusal(R"({"prompt": "x", "chat_template_kwargs": {}})").second, "chat_template_kwargs");
  EXPECT_EQ(refusal(kChatStart + R"(, "prompt": "x"})", c).second, "prompt");
  EXPECT_EQ(refusal(kChatStart + R"(, "echo": false})", c).second, "echo");
  EXPECT_EQ(refusal(kChatStart + R"(, "best_of": 1})", c).second, "best_of");
  // The first unknown field is named before a missing required one.
  EXPECT_EQ(refusal(R"({"promt": "x"})").second, "promt");
}

// A body with `name` set to `value` for the endpoint.
std::string body_with(Endpoint e, const std::string& name, const std::string& value) {
  const std::string start = e == Endpoint::ChatCompletions ? kChatStart : std::string(R"({"prompt": "x")");
  return start + ", \"" + name + "\": " + value + "}";
}

std::vector<Endpoint> endpoints_of(const RequestParam& p) {
  if (p.endpoints == ParamEndpoints::Both) return {Endpoint::Completions, Endpoint::ChatCompletions};
  return {p.endpoints == ParamEndpoints::Chat ? Endpoint::ChatCompletions : Endpoint::Completions};
}

TEST(ServerRequest, EveryNonHonoredFieldIsChecked) {
  // For each field: a value that is accepted (absent for a refused one) and values that are refused.
  const std::map<std::string, std::pair<std::string, std::vector<std::string>>> cases = {
      {"user", {R"("u-1")", {"3"}}},
      {"metadata", {R"({"team": "a"})", {R"({"n": 1})", R"("x")"}}},
      {"service_tier", {R"("auto")", {"1"}}},
      {"prompt_cache_key", {R"("k")", {"[]"}}},
      {"safety_identifier", {R"("h")", {"{}"}}},
      {"store", {"false", {"true", "0"}}},
      {"n", {"1", {"2", "0", "1.0"}}},
      {"best_of", {"1", {"2"}}},
      {"echo", {"false", {"true"}}},
      {"presence_penalty", {"0", {"0.5", "-3", "\"0\""}}},
      {"frequency_penalty", {"0.0", {"-0.1", "3"}}},
      {"logit_bias", {"{}", {R"({"50256": -100})", "[]"}}},
      {"response_format",
       {R"({"type": "text"})",
        {R"({"type": "json_object"})", R"({"type": "json_schema", "json_schema": {}})", R"({"type": "xml"})",
         R"({"type": "text", "x": 1})", R"("text")"}}},
      {"tools", {"[]", {R"([{"type": "function", "function": {"name": "f"}}])", "{}"}}},
      {"tool_choice", {R"("none")", {R"("required")", R"({"type": "function", "function": {"name": "f"}})"}}},
      {"parallel_tool_calls", {"false", {"\"yes\""}}},
      {"modalities", {R"(["text"])", {R"(["text", "audio"])", "[]"}}},
      {"suffix", {"", {R"("}")"}}},
      {"functions", {"", {"[]"}}},
      {"function_call", {"", {R"("none")"}}},
      {"audio", {"", {R"({"voice": "alloy", "format": "wav"})"}}},
      {"prediction", {"", {R"({"type": "content", "content": "x"})"}}},
      {"reasoning_effort", {"", {R"("low")"}}},
      {"verbosity", {"", {R"("low")"}}},
      {"web_search_options", {"", {"{}"}}},
  };
  for (const RequestParam& p : request_params()) {
    if (p.status == ParamStatus::Honored) continue;
    const auto it = cases.find(p.name);
    ASSERT_NE(it, cases.end()) << p.name << " has no test case";
    const auto& [good, bads] = it->second;
    for (const Endpoint e : endpoints_of(p)) {
      if (!good.empty()) {
        EXPECT_EQ(refusal(body_with(e, p.name, good), e), std::make_pair(0, std::string())) << p.name;
      }
      // null is "not given", whatever the field.
      EXPECT_EQ(refusal(body_with(e, p.name, "null"), e), std::make_pair(0, std::string())) << p.name;
      for (const auto& bad : bads)
        EXPECT_EQ(refusal(body_with(e, p.name, bad), e), std::make_pair(400, std::string(p.name)))
            << p.name << " " << bad;
    }
  }
  const auto constrained = refusal_at_default_limits(
      body_with(Endpoint::ChatCompletions, "response_format", R"({"type": "json_object"})"), Endpoint::ChatCompletions);
  EXPECT_EQ(constrained.message, "'response_format': constrained decoding is not supported");
  EXPECT_EQ(refusal_at_default_limits(body_with(Endpoint::ChatCompletions, "store", "true"), Endpoint::ChatCompletions)
                .message,
            "'store': nothing is stored: only false");
}

TEST(ServerRequest, StreamOptionsKeys) {
  const std::string start = R"({"prompt": "x", "stream": true, "stream_options": )";
  EXPECT_TRUE(completion(start + R"({"include_usage": true, "include_obfuscation": false}})").include_usage);
  EXPECT_FALSE(completion(start + R"({}})").include_usage);
  EXPECT_EQ(refusal(start + R"({"include_obfuscation": true}})").second, "stream_options.include_obfuscation");
  EXPECT_EQ(refusal(start + R"({"continuous_usage_stats": true}})").second, "stream_options.continuous_usage_stats");
  EXPECT_EQ(refusal(start + R"({"include_usage": 1}})").second, "stream_options.include_usage");
}

TEST(ServerRequest, MessageFieldsAreAWhitelist) {
  const Endpoint c = Endpoint::ChatCompletions;
  const auto r = chat(R"({"messages": [
      {"role": "system", "content": "s", "name": "setup"},
      {"role": "user", "content": [{"type": "text", "text": "q"}], "name": "ann"},
      {"role": "assistant", "content": null, "reasoning_content": "think", "refusal": null,
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1"},
      {"role": "assistant", "content": "a", "reasoning": "r"}]})");
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[1]["content"], "q");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "c1");  // passed to the template as sent
  auto at = [&](const std::string& message) { return refusal(R"({"messages": [)" + message + "]}", c).second; };
  EXPECT_EQ(at(R"({"role": "user", "content": "x", "x": 1})"), "messages[0].x");
  EXPECT_EQ(at(R"({"role": "user", "content": "x", "audio": {"id": "a"}})"), "messages[0].audio");
  EXPECT_EQ(at(R"({"role": "user", "content": "x", "name": 5})"), "messages[0].name");
  EXPECT_EQ(at(R"({"role": "assistant", "content": "x", "tool_calls": {}})"), "messages[0].tool_calls");
  EXPECT_EQ(at(R"({"role": "tool", "content": "x", "tool_call_id": 1})"), "messages[0].tool_call_id");
  EXPECT_EQ(at(R"({"role": "assistant", "content": "x", "reasoning_content": []})"), "messages[0].reasoning_content");
  EXPECT_EQ(at(R"({"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {}}]})"),
            "messages[0].content[0]");
  EXPECT_EQ(at(R"({"role": "user", "content": [{"type": "text"}]})"), "messages[0].content[0].text");
  EXPECT_EQ(at(R"({"role": "user", "content": [{"type": 5, "text": "a"}]})"), "messages[0].content[0]");
  EXPECT_EQ(at(R"({"role": "user", "content": [{"type": "text", "text": "a"}, "b"]})"), "messages[0].content[1]");
  for (const char* part : {"image_url", "input_audio", "file", "refusal"})
    EXPECT_EQ(at(fmt::format(R"({{"role": "user", "content": [{{"type": "{}"}}]}})", part)), "messages[0].content[0]");
}

// docs/server.md's "Request parameters" tables are the code's tables, row
// for row; on a mismatch the expected rows are printed to paste in.
TEST(ServerRequest, DocsTableIsTheCodeTable) {
  const std::string doc = test::read_file(std::string(NEXTN_SOURCE_DIR) + "/docs/server.md");
  const size_t start = doc.find("\n## Request parameters\n");
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("\n## ", start + 1);
  std::istringstream section(doc.substr(start, end - start));
  std::vector<std::string> rows;
  for (std::string line; std::getline(section, line);)
    if (line.rfind("| `", 0) == 0) rows.push_back(line);
  std::vector<std::string> expected;
  for (const auto* table : {&request_params(), &message_fields()})
    for (const RequestParam& p : *table)
      expected.push_back(fmt::format("| `{}` | {} | {} | {} |", p.name, param_endpoints_name(p.endpoints),
                                     param_status_name(p.status), p.note));
  std::string want;
  for (const auto& e : expected) want += e + "\n";
  EXPECT_EQ(rows, expected) << "expected rows:\n" << want;
}

TEST(ServerRequest, ErrorJsonHasOpenAIsShape) {
  const auto j = error_json(400, "bad", "temperature");
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(error_json(500, "x")["error"]["type"], "server_error");
  EXPECT_EQ(error_json(429, "x")["error"]["type"], "rate_limit_error");
}

}  // namespace
}  // namespace nextn::server
