// The request parser of nextn serve (server/request.h): what OpenAI clients
// send is accepted, every bad field is a 400 naming it, a body over the
// limit is a 413.
#include <gtest/gtest.h>

#include "server/http_error.h"
#include "server/request.h"

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
CompletionRequest chat(const std::string& body) { return parse_completion_request(body, Endpoint::ChatCompletions, limits()); }

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
            "messages[0].content");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", c).second, "top_logprobs");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", c).second,
            "tools");
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
